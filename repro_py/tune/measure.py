"""The tuner's :class:`~repro_py.sweep.measure.Measure`: the fidelity ladder inside one restart.

The sweep's per-config loop (``SweepRunner.run_config``) restarts the
engine, asks this measure for the benchmark, checks the engine is alive,
asks for the gates and writes the result file. Here ``bench`` climbs the
ladder (screen -> confirm -> full) on the engine that is already running,
asking the search after every rung whether the config goes on, and
``gates`` runs the real gates only for a config that survived the last rung
(or the baseline, the lossless reference); the others are recorded as not
gated (and get no lossless gate restart). Each benchmark call is the inner measure's (the bundle's
``run_matrix`` through ``BundleMeasure``), one cell at a time.

The result's ``bench.cells`` keep the highest-fidelity measurement of each
cell (each cell says its rung in ``tune_rung``); ``bench.settings`` are those
of the last rung reached; ``bench.tune`` has every rung's figures and the
decision taken, from which ``--resume`` rebuilds the search.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from repro_py.endpoint import Endpoint
from repro_py.tune.search import Search
from repro_py.tune.sweepio import GATE_NAMES, LOSSLESS_GATES, BenchPlan, Measure, PlannedConfig


class TunerMeasure:
    def __init__(self, inner: Measure, search: Search) -> None:
        self.inner = inner
        self.search = search

    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        return await self.inner.server_info(endpoint)

    async def alive(self, endpoint: Endpoint) -> bool:
        return await self.inner.alive(endpoint)

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        ladder = self.search.settings.ladder
        best: dict[tuple[int, int], dict[str, Any]] = {}
        settings: dict[str, Any] = {}
        engine: Any = None
        for index, rung in enumerate(ladder):
            cells: list[dict[str, Any]] = []
            for cell in self.search.cells_for(cfg.label, index):
                plan = BenchPlan(
                    contexts=(cell.context,),
                    concurrency=(cell.concurrency,),
                    repeats=rung.repeats,
                    max_tokens=rung.max_tokens,
                )
                result = await self.inner.bench(endpoint, cfg, plan)
                engine = result.get("engine", engine)
                for item in result.get("cells") or []:
                    item["tune_rung"] = rung.name
                    cells.append(item)
                    best[(int(item.get("context") or 0), int(item.get("concurrency") or 0))] = item
            alive = self.search.judge(cfg.label, index, cells)
            settings = {
                "contexts": sorted({k[0] for k in best}),
                "concurrency": sorted({k[1] for k in best}),
                "repeats": rung.repeats,
                "max_tokens": rung.max_tokens,
                "tune_rung": rung.name,
            }
            if not alive or any(c.get("status") == "error" for c in cells):
                break
        out: dict[str, Any] = {
            "cells": [best[key] for key in sorted(best)],
            "settings": settings,
            "tune": self.search.records[cfg.label].tune_block(),
        }
        if engine is not None:
            out["engine"] = engine
        return out

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        if set(which) != LOSSLESS_GATES:  # the lossless gate's own restart: gated already on the production one
            wanted, why = self.search.wants_gates(cfg.label)
            if not wanted:
                return {"skipped": True, "passed": False, "reason": why}
        return await self.inner.gates(endpoint, cfg, reference, which=which)
