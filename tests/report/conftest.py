"""Fixture run directories (result files only, written as the sweep writes them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CONTEXTS = (60, 1024, 8192)
CONCURRENCY = (1, 8, 32)


def cell(context: int, concurrency: int, tps: float, *, accept: float | None, cv: float = 0.01) -> dict[str, Any]:
    return {
        "context": context,
        "concurrency": concurrency,
        "status": "ok",
        "reason": None,
        "repeats": [{"output_tps": tps}],
        "median": {
            "output_tps": tps,
            "output_tps_per_request": tps / concurrency,
            "ttft_ms": {"p50": 40.0, "p90": 50.0, "p99": 60.0},
            "itl_ms": {"p50": 6.0, "p90": 7.0, "p99": 8.0},
            "accept_length": accept,
            "verify_steps": 100,
            "errors": 0,
            "requests": concurrency,
        },
        "cv": {"output_tps": cv},
        "noisy": cv > 0.05,
    }


def result(
    label: str,
    config: dict[str, Any],
    *,
    single: float = 100.0,
    aggregate: float = 800.0,
    long_ctx: float = 60.0,
    accept: float | None = 4.5,
    gates_passed: bool = True,
    failure: dict[str, Any] | None = None,
    simulated: bool = True,
    cv: float = 0.01,
) -> dict[str, Any]:
    cells = []
    if failure is None or failure["class"] in {"gate_failed", "crashed_during_benchmark"}:
        for ctx in CONTEXTS:
            for conc in CONCURRENCY:
                if ctx == CONTEXTS[0] and conc == 1:
                    tps = single
                elif ctx == CONTEXTS[0] and conc == CONCURRENCY[-1]:
                    tps = aggregate
                elif ctx == CONTEXTS[-1] and conc == 1:
                    tps = long_ctx
                else:
                    tps = single * conc**0.5
                cells.append(cell(ctx, conc, tps, accept=accept, cv=cv))
    kind = "simulated" if simulated else "real"
    return {
        "schema": 1,
        "run_id": "fixture-run",
        "label": label,
        "config": config,
        "status": "ok" if failure is None else "failed",
        "failure": failure,
        "fingerprint": {
            "unit_sha256": "a" * 64,
            "patch_series_sha256": "b" * 64,
            "lock_sha256": "c" * 64,
            "sglang_version": "0.5.23",
            "engine_kind": kind,
            "host": "testhost",
            "config_sha256": "d" * 64,
        },
        "engine": {
            "kind": kind,
            "version": "0.5.23",
            "sim_speed": 1.0 if simulated else None,
            "max_total_num_tokens": 500000,
        },
        "reconfigure": {"time_to_ready_s": 3.0, "invocation_id": "x", "wall_s": 4.0, "changed": True},
        "bench": {"cells": cells, "settings": {"contexts": list(CONTEXTS), "concurrency": list(CONCURRENCY)}},
        "gates": {
            "coding": {"passed": gates_passed, "reason": None if gates_passed else "2/5 passed"},
            "lossless": {"passed": gates_passed, "reason": None},
            "config_echo": {"passed": True, "reason": None},
            "passed": gates_passed and failure is None,
        },
        "started_at": "2026-11-29T09:00:00+00:00",
        "finished_at": "2026-11-29T09:01:00+00:00",
        "wall_s": 60.0,
    }


def ddtree(budget: int, topk: int) -> dict[str, Any]:
    return {"algorithm": "ddtree", "budget": budget, "topk": topk, "window": 2048, "block_size": 8}


def standard_results(simulated: bool = True) -> list[dict[str, Any]]:
    s = simulated
    return [
        result("baseline", {"algorithm": "none"}, single=65, aggregate=700, long_ctx=50, accept=None, simulated=s),
        # the fastest single stream, but it garbles: must never win
        result("ddtree-b16-t4-w2048-bs8", ddtree(16, 4), single=400, aggregate=2000, long_ctx=300, accept=1.2,
               gates_passed=False, simulated=s,
               failure={"class": "gate_failed", "reason": "lossless: 6 of 6 | prompts diverge", "journal": []}),
        result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4), single=150, aggregate=790, long_ctx=90, accept=4.9,
               simulated=s),
        result("ddtree-b4-t4-w2048-bs8", ddtree(4, 4), single=120, aggregate=897, long_ctx=70, accept=3.8,
               simulated=s),
        result("ddtree-b32-t8-w2048-bs8", ddtree(32, 8), single=113, aggregate=500, long_ctx=120, accept=5.2,
               simulated=s),
        result("ddtree-b48-t8-w2048-bs8", ddtree(48, 8), simulated=s,
               failure={"class": "failed_to_start", "reason": "the engine exited during startup: CUDA OOM",
                        "journal": ["sglang: torch.OutOfMemoryError: CUDA out of memory", "exit 1"]}),
    ]  # fmt: skip


def write_run(path: Path, results: list[dict[str, Any]], *, simulated: bool = True) -> Path:
    (path / "configs").mkdir(parents=True, exist_ok=True)
    plan = {
        "schema": 1,
        "run_id": path.name,
        "simulated": simulated,
        "host": "testhost",
        "endpoint": "http://127.0.0.1:31001",
        "grid_source": "fixture",
        "configs": [{"label": r["label"], "config": r["config"]} for r in results],
        "bench": {"contexts": list(CONTEXTS), "concurrency": list(CONCURRENCY), "repeats": 3, "max_tokens": 512},
    }
    (path / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    (path / "state.json").write_text(json.dumps({"status": "complete"}), encoding="utf-8")
    for doc in results:
        (path / "configs" / f"{doc['label']}.json").write_text(json.dumps(doc), encoding="utf-8")
    return path


@pytest.fixture
def make_run(tmp_path: Path) -> Callable[..., Path]:
    def _make(
        name: str = "fixture-run", *, simulated: bool = True, results: list[dict[str, Any]] | None = None
    ) -> Path:
        return write_run(tmp_path / name, results if results is not None else standard_results(simulated),
                         simulated=simulated)  # fmt: skip

    return _make
