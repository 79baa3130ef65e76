"""The fleet runner with injected fakes: the queue over several hosts, host loss and re-queueing, a config's own
failure, offsets and flagging, the baseline first, Ctrl-C with every host restored, resume, two classes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.endpoint import Endpoint
from repro_py.results.failures import FAILED_TO_START
from repro_py.sweep import state
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.fleethosts import FleetHost
from repro_py.sweep.fleetrun import EXCLUDED, FLAGGED, ClassRun, FleetOptions, FleetOutcome, FleetRunner
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.plan import Plan
from tests.sweep.conftest import BUNDLE, FakeMeasure, SlowReconfigurer, bench_result, make_plan

GRID: list[dict[str, object]] = [
    {"algorithm": "none"},
    *({"algorithm": "ddtree", "budget": b, "topk": 4, "window": 2048} for b in (4, 6, 8, 10, 12, 16, 24)),
    {"algorithm": "dflash", "window": 2048},
]
DEFAULT: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048}


class HostMeasure(FakeMeasure):
    """FakeMeasure whose throughput depends on the host (its endpoint's port): ``speed`` port -> factor."""

    def __init__(self, speed: dict[int, float] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.speed = dict(speed or {})
        self.order: list[tuple[str, str]] = []  # (what, label) in the order it happened
        self.which: list[tuple[str, str]] = []  # (label, production | lossless) per gates call, in order

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        await asyncio.sleep(0.01)
        port = int(endpoint.base_url.rsplit(":", 1)[1])
        self.benched.append(cfg.label)
        return bench_result(100.0 * self.speed.get(port, 1.0))

    async def gates(self, endpoint: Endpoint, cfg: PlannedConfig, reference: Any, **kwargs: Any) -> dict[str, Any]:
        self.order.append(("gates", cfg.label))
        self.which.append((cfg.label, "lossless" if set(kwargs.get("which") or ()) == {"lossless"} else "production"))
        return await super().gates(endpoint, cfg, reference, **kwargs)


def _plan(tmp_path: Path, grid: list[dict[str, object]] = GRID, mode: str = "separate") -> Plan:
    return make_plan(grid, tmp_path=tmp_path, default=DEFAULT, lossless_mode=mode)


def _hosts(plan: Plan, recs: list[SlowReconfigurer], key: str = "classA") -> list[FleetHost]:
    out = []
    for i, rec in enumerate(recs, start=1):
        target = dataclasses.replace(plan.target, host=f"h{i}", endpoint=Endpoint(f"http://127.0.0.1:{40000 + i}"))
        out.append(FleetHost(f"h{i}", target, rec, key, {"gpu_model": "stand-in"}, check=rec.check))
    return out


def _runner(tmp_path: Path, classes: list[ClassRun], **options: Any) -> FleetRunner:
    return FleetRunner(tmp_path / "run", classes, bundle=BUNDLE, record={"schema": 1},
                       options=FleetOptions(**options), console=Console(quiet=True))  # fmt: skip


def _class(tmp_path: Path, plan: Plan, hosts: list[FleetHost], measure: FakeMeasure, key: str = "classA") -> ClassRun:
    return ClassRun(key, {}, plan, state.RunDir(tmp_path / "run" / key), measure, hosts)


def _results(cls: ClassRun) -> dict[str, dict[str, Any]]:
    return {r["label"]: dict(r) for r in cls.run_dir.results()}


async def test_every_config_measured_once_spread_over_the_hosts_and_every_host_restored(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    recs = [SlowReconfigurer() for _ in range(3)]
    measure = HostMeasure()
    cls = _class(tmp_path, plan, _hosts(plan, recs), measure)
    outcome = await _runner(tmp_path, [cls]).run()

    results = _results(cls)
    assert set(results) == {c.label for c in plan.configs}
    assert sorted(outcome.ran) == sorted(results) and not outcome.failed and not outcome.stranded
    by_host = {r["host"]["name"] for r in results.values()}
    assert by_host == {"h1", "h2", "h3"}, by_host  # the work was spread
    assert all(r["status"] == "ok" and r["attempts"] == [] for r in results.values())
    assert all(r["host"]["class"] == "classA" and r["host"]["offset"] == 0.0 for r in results.values())
    # the baseline's gates came before any other config's (its references are what they compare with)
    assert measure.order[0] == ("gates", "baseline")
    # every host measured the reference first and restored the default last
    for rec in recs:
        assert rec.calls[0] == "ddtree-b8-t4-w2048-bs8" and rec.calls[-1] == "ddtree-b8-t4-w2048-bs8"
        assert rec.restores[-1] is True and rec.restores.count(True) == 1
    assert outcome.not_restored() == {}
    record = json.loads((tmp_path / "run" / "fleet.json").read_text())
    assert {h: v["status"] for h, v in record["hosts"].items()} == {"h1": "active", "h2": "active", "h3": "active"}
    assert sum(len(v["configs"]) for v in record["hosts"].values()) == len(plan.configs)


async def test_a_host_lost_mid_run_has_its_config_measured_on_another_host(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    recs = [SlowReconfigurer(), SlowReconfigurer(lost_after=4), SlowReconfigurer()]
    cls = _class(tmp_path, plan, _hosts(plan, recs), HostMeasure())
    outcome = await _runner(tmp_path, [cls]).run()

    results = _results(cls)
    assert set(results) == {c.label for c in plan.configs}  # nothing lost
    assert all(r["status"] == "ok" for r in results.values()), {k: r["failure"] for k, r in results.items()}
    moved = [r for r in results.values() if r["attempts"]]
    assert len(moved) == 1, [r["attempts"] for r in results.values()]
    (attempt,) = moved[0]["attempts"]
    assert attempt["host"] == "h2" and attempt["cause"].startswith("unreachable: ssh")
    assert attempt["failure"]["class"] == FAILED_TO_START
    assert moved[0]["host"]["name"] in {"h1", "h3"}
    assert all(r["host"]["name"] != "h2" for r in results.values() if r["label"] == moved[0]["label"])
    h2 = outcome.hosts["h2"]
    assert h2.status == EXCLUDED and h2.cause is not None and "unreachable" in h2.cause
    assert set(outcome.not_restored()) == {"h2"}  # named, not hidden
    assert outcome.hosts["h1"].restore is not None and outcome.hosts["h1"].restore["status"] == "ok"


async def test_failing_the_same_way_twice_in_a_row_takes_the_host_out_and_both_configs_move(tmp_path: Path) -> None:
    plan = _plan(tmp_path, grid=[g for g in GRID if g != DEFAULT])  # the reference config starts on every host
    why = "engine exited with status 1 (pid 4242): NCCL error: unhandled system error"
    bad = SlowReconfigurer(fail={c.label: why for c in plan.configs if c.label != "baseline"})
    recs = [SlowReconfigurer(delay=0.05), bad, SlowReconfigurer(delay=0.05)]
    cls = _class(tmp_path, plan, _hosts(plan, recs), HostMeasure())
    outcome = await _runner(tmp_path, [cls]).run()

    results = _results(cls)
    assert set(results) == {c.label for c in plan.configs}
    assert all(r["status"] == "ok" for r in results.values()), {k: r["failure"] for k, r in results.items()}
    moved = {k: r["attempts"] for k, r in results.items() if r["attempts"]}
    assert len(moved) == 2 and all(a[0]["host"] == "h2" for a in moved.values()), moved
    assert all("failed the same way on two configs in a row" in a[0]["cause"] for a in moved.values())
    assert outcome.hosts["h2"].status == EXCLUDED


async def test_a_configs_own_failure_stays_its_own(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    label = "ddtree-b24-t4-w2048-bs8"
    recs = [SlowReconfigurer(fail={label: "engine exited: CUDA out of memory"}) for _ in range(3)]
    cls = _class(tmp_path, plan, _hosts(plan, recs), HostMeasure())
    outcome = await _runner(tmp_path, [cls]).run()

    results = _results(cls)
    assert results[label]["status"] == "failed" and results[label]["attempts"] == []
    assert results[label]["failure"]["class"] == FAILED_TO_START
    assert sum(rec.calls.count(label) for rec in recs) == 1  # not retried elsewhere
    assert all(hs.status == "active" for hs in outcome.hosts.values())
    assert list(outcome.failed) == [label]


async def test_a_host_beyond_the_offset_limit_is_flagged_and_measures_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    recs = [SlowReconfigurer() for _ in range(3)]
    measure = HostMeasure(speed={40001: 1.02, 40002: 1.0, 40003: 1.2})
    cls = _class(tmp_path, plan, _hosts(plan, recs), measure)
    outcome = await _runner(tmp_path, [cls]).run()

    h3 = outcome.hosts["h3"]
    # the class median is taken without the flagged host: h1 and h2 alone (1.01)
    assert h3.status == FLAGGED and h3.offset is not None and h3.offset.offset == round(1.2 / 1.01 - 1, 5)
    assert "beyond the limit of 5%" in str(h3.cause)
    results = _results(cls)
    assert {r["host"]["name"] for r in results.values()} == {"h1", "h2"}
    offsets = {r["host"]["name"]: r["host"]["offset"] for r in results.values()}
    assert offsets == {"h1": round(1.02 / 1.01 - 1, 5), "h2": round(1.0 / 1.01 - 1, 5)}
    assert recs[2].calls == ["ddtree-b8-t4-w2048-bs8", "ddtree-b8-t4-w2048-bs8"]  # reference and restore only


async def test_the_baseline_host_lost_gives_the_baseline_to_another_host_without_deadlock(tmp_path: Path) -> None:
    plan = _plan(tmp_path, mode="shared")
    # h1 takes the baseline (first in the queue) and is gone at its restart; h2, h3 wait at their gates
    recs = [SlowReconfigurer(lost_after=2, delay=0.1), SlowReconfigurer(), SlowReconfigurer()]
    measure = HostMeasure()
    cls = _class(tmp_path, plan, _hosts(plan, recs), measure)
    outcome = await asyncio.wait_for(_runner(tmp_path, [cls]).run(), timeout=60)

    results = _results(cls)
    assert set(results) == {c.label for c in plan.configs}
    assert all(r["status"] == "ok" for r in results.values()), {k: r["failure"] for k, r in results.items()}
    assert results["baseline"]["attempts"][0]["host"] == "h1"
    assert measure.order[0] == ("gates", "baseline")
    assert outcome.hosts["h1"].status == EXCLUDED


async def test_a_host_whose_restart_raises_is_taken_out_and_nothing_waits_for_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)

    def boom(cfg: PlannedConfig, n: int) -> None:
        if n == 2:
            raise RuntimeError("ansible-runner: the event stream broke")

    recs = [SlowReconfigurer(), SlowReconfigurer(hook=boom), SlowReconfigurer()]
    cls = _class(tmp_path, plan, _hosts(plan, recs), HostMeasure())
    outcome = await asyncio.wait_for(_runner(tmp_path, [cls]).run(), timeout=60)
    assert outcome.hosts["h2"].status == EXCLUDED
    assert outcome.hosts["h2"].cause == "its worker raised RuntimeError: ansible-runner: the event stream broke"
    results = _results(cls)
    assert set(results) == {c.label for c in plan.configs} and not outcome.stranded
    (moved,) = [r for r in results.values() if r["attempts"]]
    assert moved["attempts"][0]["host"] == "h2" and moved["host"]["name"] != "h2"


async def test_production_gates_wait_for_the_baselines_samples_not_for_its_lossless_restart(tmp_path: Path) -> None:
    """With --lossless-restart separate the other hosts' production gates read only the baseline's samples (made in
    its production stage): they go on while the baseline's own lossless restart is still loading; their lossless
    gates wait for its outputs."""
    plan = _plan(tmp_path)

    def slow_gate_restart(cfg: PlannedConfig, _n: int) -> None:
        if cfg.label == "baseline" and recs[0].deterministic[-1]:
            time.sleep(0.6)  # the baseline's deterministic restart (its lossless gate's) takes a while

    recs = [SlowReconfigurer(hook=slow_gate_restart), SlowReconfigurer(), SlowReconfigurer()]
    measure = HostMeasure()
    cls = _class(tmp_path, plan, _hosts(plan, recs), measure)
    await asyncio.wait_for(_runner(tmp_path, [cls]).run(), timeout=60)

    baseline_lossless = measure.which.index(("baseline", "lossless"))
    early = [label for label, stage in measure.which[:baseline_lossless] if label != "baseline"]
    assert early and all(stage == "production" for label, stage in measure.which[:baseline_lossless]
                         if label != "baseline"), measure.which  # fmt: skip
    first_other_lossless = next(i for i, (label, stage) in enumerate(measure.which)
                                if stage == "lossless" and label != "baseline")  # fmt: skip
    assert first_other_lossless > baseline_lossless
    assert all(r["status"] == "ok" for r in _results(cls).values())


async def test_ctrl_c_stops_every_host_restores_each_and_resume_finishes_the_rest(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    holder: dict[str, FleetRunner] = {}

    def interrupt(cfg: PlannedConfig, n: int) -> None:
        if n == 4:  # on one host's 4th restart
            loop = holder["loop"]  # type: ignore[assignment]
            loop.call_soon_threadsafe(holder["runner"].host_tasks.on_sigint)

    recs = [SlowReconfigurer(hook=interrupt if i == 0 else None) for i in range(3)]
    cls = _class(tmp_path, plan, _hosts(plan, recs), HostMeasure())
    runner = _runner(tmp_path, [cls])
    holder["runner"] = runner
    holder["loop"] = asyncio.get_running_loop()  # type: ignore[assignment]
    outcome: FleetOutcome = await runner.run()

    assert outcome.interrupted
    assert all(rec.restores[-1] is True for rec in recs)  # every host restored after Ctrl-C
    assert outcome.not_restored() == {}
    done = _results(cls)
    assert 0 < len(done) < len(plan.configs)
    assert state.RunDir(tmp_path / "run").read_state()["status"] == state.STATE_INTERRUPTED

    recs2 = [SlowReconfigurer() for _ in range(2)]  # resumed with the hosts that are there: two of them
    cls2 = _class(tmp_path, plan, _hosts(plan, recs2), HostMeasure())
    outcome2 = await _runner(tmp_path, [cls2]).run()
    assert set(outcome2.skipped) == set(done)
    assert set(_results(cls2)) == {c.label for c in plan.configs}
    assert not set(outcome2.ran) & set(done)  # nothing measured twice


async def test_two_classes_each_measure_the_whole_grid_in_their_own_directory(tmp_path: Path) -> None:
    plan = _plan(tmp_path, grid=GRID[:4])
    a = _class(tmp_path, plan, _hosts(plan, [SlowReconfigurer(), SlowReconfigurer()], "A"), HostMeasure(), "A")
    hosts_b = _hosts(plan, [SlowReconfigurer()], "B")
    hosts_b[0] = dataclasses.replace(hosts_b[0], name="h9", target=dataclasses.replace(hosts_b[0].target, host="h9"))
    b = _class(tmp_path, plan, hosts_b, HostMeasure(), "B")
    await _runner(tmp_path, [a, b]).run()
    assert set(_results(a)) == set(_results(b)) == {c.label for c in plan.configs}
    assert {r["host"]["class"] for r in _results(b).values()} == {"B"}
    assert {r["host"]["name"] for r in _results(b).values()} == {"h9"}
