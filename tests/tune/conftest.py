"""Helpers for the tuner's tests: a tuning loop over fakes (no processes) and small spaces."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.endpoint import Endpoint
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.fleethosts import FleetHost
from repro_py.sweep.plan import make_plan
from repro_py.sweep.state import RunDir
from repro_py.tune.budget import Budget
from repro_py.tune.fleetloop import FleetTuneLoop
from repro_py.tune.ladder import Rung, make_ladder
from repro_py.tune.loop import TuneLoop
from repro_py.tune.noise import NoiseModel
from repro_py.tune.objectives import OBJECTIVE_NAMES, make_objectives, parse_slo
from repro_py.tune.search import Search, SearchSettings
from repro_py.tune.space import load_space
from tests.sweep.conftest import BUNDLE, FakeReconfigurer, make_target
from tests.tune.fakes import ModelMeasure

DEFAULT: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}
SMALL_SPACE: dict[str, Any] = {
    "configs": [{"algorithm": "none"}, {"algorithm": "dflash", "block_size": 8, "window": 2048}],
    "grid": {
        "algorithm": ["ddtree"],
        "budget": [3, 4, 5, 6, 8, 12, 16],
        "topk": [1, 2, 4],
        "block_size": [8],
        "window": [2048],
    },
}
MEDIUM_SPACE: dict[str, Any] = {
    "configs": [{"algorithm": "none"}],
    "grid": [
        {
            "algorithm": ["ddtree"],
            "budget": [2, 3, 4, 5, 6, 8, 12, 16, 32, 64],
            "topk": [1, 2, 4, 8],
            "block_size": [8, 16],
            "window": [2048, "none"],
        },
        {"algorithm": ["dflash"], "block_size": [8, 16], "window": [2048, "none"]},
    ],
}


def make_loop(
    tmp_path: Path,
    space: Mapping[str, Any] = SMALL_SPACE,
    objectives: Sequence[str] = ("single-stream",),
    *,
    measure: Any = None,
    reconfigurer: Any = None,
    budget: Budget | None = None,
    slos: Sequence[str] = (),
    ladder: tuple[Rung, ...] | None = None,
    default: Mapping[str, object] | None = DEFAULT,
    run: str = "run",
    lossless_mode: str = "separate",
) -> TuneLoop:
    hostvars: dict[str, Any] = {"tune_space": dict(space)}
    if default is not None:
        hostvars["sweep_default_config"] = dict(default)
    target = make_target(hostvars=hostvars)
    space_obj = load_space(target)
    settings = SearchSettings(
        objectives=make_objectives(list(objectives)),
        ladder=ladder or make_ladder(),
        slos=tuple(parse_slo(s) for s in slos),
        all_objectives=make_objectives(list(OBJECTIVE_NAMES)),
    )
    plan = make_plan(target, list(space_obj.raws), grid_source="test", bench=BenchPlan(), results_root=tmp_path,
                     lossless_mode=lossless_mode)  # fmt: skip
    search = Search(space_obj, settings, NoiseModel(), default=plan.default_config)
    run_dir = RunDir(tmp_path / "results" / run)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    if not run_dir.plan.is_file():
        run_dir.plan.write_text(json.dumps(plan.as_dict(run_dir.run_id)), encoding="utf-8")
    return TuneLoop(
        plan,
        search,
        run_dir,
        reconfigurer if reconfigurer is not None else FakeReconfigurer(),
        measure if measure is not None else ModelMeasure(0),
        bundle=BUNDLE,
        budget=budget or Budget(max_restarts=12),
        console=Console(quiet=True),
    )


def make_fleet_loop(
    tmp_path: Path,
    reconfigurers: Sequence[Any],
    *,
    measure: Any = None,
    space: Mapping[str, Any] = SMALL_SPACE,
    objectives: Sequence[str] = ("single-stream",),
    budget: Budget | None = None,
    run: str = "run",
    lossless_mode: str = "separate",
    offset_limit: float = 0.05,
) -> FleetTuneLoop:
    """The tuner on ``len(reconfigurers)`` hosts h1.. (endpoint port 40001..), each restarting with its own fake."""
    loop = make_loop(tmp_path, space, objectives, measure=measure, budget=budget, run=run, lossless_mode=lossless_mode)
    plan = loop.plan
    hosts = []
    for i, rec in enumerate(reconfigurers, start=1):
        target = dataclasses.replace(plan.target, host=f"h{i}", endpoint=Endpoint(f"http://127.0.0.1:{40000 + i}"))
        hosts.append(FleetHost(f"h{i}", target, rec, "classA", {"gpu_model": "stand-in"}, check=rec.check))
    search = loop.search
    search.settings = dataclasses.replace(search.settings, reference_restarts=max(2, len(hosts)))
    return FleetTuneLoop(plan, search, loop.run_dir, hosts, measure if measure is not None else ModelMeasure(0),
                         bundle=BUNDLE, budget=loop.budget, class_key="classA", offset_limit=offset_limit,
                         console=Console(quiet=True))  # fmt: skip


def fixed_cell(values: Sequence[float]) -> dict[str, Any]:
    """A single-stream cell (60-token prompt) whose repeats read ``values`` tok/s, as the benchmark client writes it
    (the time per output token under ``itl_token_ms``)."""
    return {
        "context": 60,
        "concurrency": 1,
        "status": "ok",
        "median": {"accept_length": 4.0},
        "repeats": [{"output_tps": v, "errors": 0, "ok": 1, "itl_token_ms": {"p50": 30.0}} for v in values],
    }
