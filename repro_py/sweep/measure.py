"""What the sweep measures against a ready engine: server info, benchmark, gates.

:class:`Measure` is the interface the sweep loop uses; :class:`BundleMeasure`
implements it with :mod:`repro_py.bench` (``run_matrix``) and
:mod:`repro_py.gates` (``run_gates``). Tests inject lighter ones.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from repro_py import gates as gates_mod
from repro_py.atomicio import write_json_atomic
from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.bench.server_info import fetch_server_info
from repro_py.codeeval.sandbox import isolation_in_force, require_isolation
from repro_py.endpoint import Endpoint
from repro_py.gates import GATE_NAMES
from repro_py.gates import sampled as sampled_gate
from repro_py.gates.lossless import BASELINE, make_reference
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig


class Measure(Protocol):
    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        """The ``engine`` block: kind, version, sim_speed, max_total_num_tokens, deterministic_inference (raises on
        failure)."""
        ...

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        """``repro_py.bench`` result: ``{"cells": [...], "settings": {...}, ...}``."""
        ...

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        """``{"coding", "lossless", "config_echo", "passed", ...}`` (the gates named in ``which``; ``passed`` over
        those); with ``reference`` None the lossless gate has nothing to compare to: the baseline's result then
        carries ``lossless_reference`` (its outputs, when they may be one) for later configs; a speculative config
        is not judged. Asked for the lossless gate alone, the decision to gate was taken already."""
        ...

    async def alive(self, endpoint: Endpoint) -> bool:
        """Whether the engine still answers (cheap: ``/ready``, then ``/health``)."""
        ...


async def engine_alive(endpoint: Endpoint, *, timeout_s: float = 3.0) -> bool:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for path in ("/ready", "/health"):
            try:
                async with session.get(endpoint.url(path), headers=endpoint.headers()) as resp:
                    if resp.status == 200:
                        return True
                    if resp.status != 404:
                        return False
            except (aiohttp.ClientError, TimeoutError, OSError):
                return False
    return False


def coding_sandbox(*, allow_unisolated: bool) -> dict[str, Any]:
    """The coding gate's sandbox, checked before anything restarts: ``{"mode", "description",
    "unisolated_allowed"}``; raises ``IsolationUnavailable`` (naming what is missing) when no isolating
    mode works here and ``allow_unisolated`` is false."""
    mode = require_isolation(allow_unisolated=allow_unisolated)
    return {"mode": mode, "description": isolation_in_force(mode), "unisolated_allowed": allow_unisolated}


def _engine_block(summary: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """``deterministic_inference``: whether the engine that gives the figures runs sglang's deterministic
    inference (its ``/server_info`` ``enable_deterministic_inference``; None when it does not say)."""
    flag = raw.get("enable_deterministic_inference")
    return {
        "kind": summary.get("kind"),
        "version": summary.get("version"),
        "sim_speed": summary.get("sim_speed"),
        "max_total_num_tokens": summary.get("max_total_num_tokens"),
        "deterministic_inference": flag if isinstance(flag, bool) else None,
    }


class BundleMeasure:
    """The bundle's own benchmark and gates.

    ``sampled_reference``: the run's file of the baseline's samples for the sampled gate
    (``sampled-reference.json``): read before each config's gates, written (atomically, once) when
    the baseline's sampled gate made one, so ``--resume`` judges later configs against it.
    """

    def __init__(self, *, gates_kwargs: Mapping[str, Any] | None = None, sampled_reference: Path | None = None) -> None:
        self.gates_kwargs = dict(gates_kwargs or {})
        self.sampled_path = sampled_reference
        self._sampled: Mapping[str, Any] | None = None

    def _sampled_reference(self) -> Mapping[str, Any] | None:
        if self._sampled is None and self.sampled_path is not None and self.sampled_path.is_file():
            doc = json.loads(self.sampled_path.read_text(encoding="utf-8"))
            ref = doc.get("reference") if isinstance(doc, dict) else None
            self._sampled = ref if isinstance(ref, Mapping) else None
        return self._sampled

    def _keep_sampled(self, cfg: PlannedConfig, sampled: dict[str, Any], reference: Mapping[str, Any] | None) -> None:
        """The baseline's samples become the run's sampled reference (never kept in a config's result)."""
        made = sampled.pop("samples", None)
        if reference is not None or cfg.spec.algorithm != BASELINE or not isinstance(made, dict):
            return
        self._sampled = sampled_gate.make_reference({**sampled, "samples": made}, source=cfg.label)
        if self.sampled_path is not None:
            doc = {"label": cfg.label, "config": cfg.short(), "reference": self._sampled}
            write_json_atomic(self.sampled_path, doc)

    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        async with aiohttp.ClientSession() as session:
            info = await fetch_server_info(session, endpoint)
        return _engine_block(info.engine_summary(), info.raw)

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        settings = BenchSettings(
            contexts=bench.contexts, concurrency=bench.concurrency, repeats=bench.repeats, max_tokens=bench.max_tokens,
            temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
        )  # fmt: skip
        result: dict[str, Any] = await run_matrix(endpoint, settings)
        return result

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        run_gates: Any = gates_mod.run_gates
        sampled_ref = self._sampled_reference() if "sampled" in which else None
        call = run_gates(
            endpoint, cfg.spec, reference, sampled_reference=sampled_ref, which=which, **self.gates_kwargs
        )
        result: dict[str, Any] = await call if inspect.isawaitable(call) else call
        if isinstance(result.get("sampled"), dict):
            self._keep_sampled(cfg, result["sampled"], sampled_ref)
        lossless = result.get("lossless") or {}
        made = lossless.get("verdict") == "reference" and isinstance(lossless.get("output_ids"), dict)
        if reference is None and made:
            result["lossless_reference"] = make_reference(  # the baseline's outputs (lossless gives no other verdict)
                lossless["output_ids"], max_new_tokens=int(lossless.get("max_new_tokens") or 0), source=cfg.label,
                deterministic=(lossless.get("deterministic") or {}).get("server") is True,
            )
        return result

    async def alive(self, endpoint: Endpoint) -> bool:
        return await engine_alive(endpoint)
