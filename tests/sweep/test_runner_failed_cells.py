"""A benchmark whose cells failed ends the config as ``crashed_during_benchmark`` with the journal,
even when the engine answers again afterwards (systemd restarted it under the benchmark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.endpoint import Endpoint
from repro_py.sweep import state
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.runner import SweepOptions, SweepRunner
from tests.sweep.conftest import BUNDLE, FakeMeasure, FakeReconfigurer, bench_result, make_plan

CONFIG: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048}


class FailedCellMeasure(FakeMeasure):
    """The engine died in one cell and came back: that cell failed, the engine is alive again."""

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        result = bench_result(100.0)
        cell = result["cells"][1]
        cell.update(status="failed", median=None,
                    reason="the server stopped answering during repeat 1: 4/4 requests failed (error budget 0); "
                           "first: ServerDisconnectedError")
        return result


async def test_failed_cells_end_the_config_as_crashed_during_benchmark(tmp_path: Path) -> None:
    plan = make_plan([CONFIG], tmp_path=tmp_path, default=None)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    measure = FailedCellMeasure()
    runner = SweepRunner(plan, run_dir, FakeReconfigurer(), measure, bundle=BUNDLE,
                         options=SweepOptions(restore=False), console=Console(quiet=True))
    await runner.run()
    (doc,) = run_dir.results()
    assert doc["status"] == "failed"
    failure = doc["failure"]
    assert failure["class"] == "crashed_during_benchmark"
    # the cause found in the journal first, the benchmark's own account after it
    assert failure["reason"].startswith("the engine crashed (segmentation fault)")
    assert "the benchmark failed (1/4 cells failed; first: context=60 concurrency=8" in failure["reason"]
    assert "stopped answering during repeat 1" in failure["reason"]
    assert failure["journal"]  # the engine's journal comes with it
    assert measure.references == []  # the gates did not run on a config whose benchmark failed
