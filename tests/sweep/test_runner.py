"""The sweep loop with injected fakes: classification, resume, reference, restore, atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from repro_py.results.failures import FAILURE_CLASSES
from repro_py.sweep import fingerprint, state
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.plan import Plan
from repro_py.sweep.runner import SweepOptions, SweepRunner
from tests.sweep.conftest import BUNDLE, FakeMeasure, FakeReconfigurer, make_plan

GRID: list[dict[str, object]] = [
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048},
    {"algorithm": "none"},
    {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048},
    {"algorithm": "ddtree", "budget": 32, "topk": 8, "window": 2048},
    {"algorithm": "ddtree", "budget": 4, "topk": 4, "window": 2048},
    {"algorithm": "dflash", "window": 2048},
]
DEFAULT: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048}


def _runner(
    plan: Plan, run_dir: state.RunDir, rec: FakeReconfigurer, measure: FakeMeasure, **options: Any
) -> SweepRunner:
    return SweepRunner(
        plan,
        run_dir,
        rec,
        measure,
        bundle=BUNDLE,
        options=SweepOptions(**options),
        console=Console(quiet=True),
    )


def _results(run_dir: state.RunDir) -> dict[str, dict[str, Any]]:
    return {r["label"]: r for r in run_dir.results()}


async def test_every_config_gets_a_result_with_a_classified_reason(tmp_path: Path) -> None:
    plan = make_plan(GRID, tmp_path=tmp_path, default=DEFAULT)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    rec = FakeReconfigurer(fail={"ddtree-b32-t8-w2048-bs8": "engine exited: CUDA out of memory"})
    measure = FakeMeasure(
        bench_fail={"ddtree-b16-t4-w2048-bs8"},
        gate_fail={"ddtree-b4-t4-w2048-bs8"},
    )
    outcome = await _runner(plan, run_dir, rec, measure).run()

    results = _results(run_dir)
    assert set(results) == {c.label for c in plan.configs}
    assert not outcome.interrupted
    for label, doc in results.items():
        assert doc["schema"] == 1 and doc["run_id"] == "r1" and doc["label"] == label
        assert doc["status"] in {"ok", "failed"}
        if doc["status"] == "failed":
            assert doc["failure"]["class"] in FAILURE_CLASSES
            assert doc["failure"]["reason"]
        for key in (*fingerprint.RESUME_KEYS, "unit_sha256", "sglang_version"):
            assert key in doc["fingerprint"]
        assert doc["fingerprint"]["engine_kind"] == "simulated"
    f = results["ddtree-b32-t8-w2048-bs8"]["failure"]
    assert f["class"] == "failed_to_start"
    assert "CUDA out of memory" in f["reason"]
    assert f["journal"] == ["engine: CUDA out of memory", "engine: exiting"]
    f = results["ddtree-b16-t4-w2048-bs8"]["failure"]
    assert f["class"] == "crashed_during_benchmark"
    assert "Connection reset by peer" in f["reason"]
    assert "Segmentation fault" in " ".join(f["journal"])
    f = results["ddtree-b4-t4-w2048-bs8"]["failure"]
    assert f["class"] == "gate_failed"
    assert "coding: 1/5 passed" in f["reason"] and "lossless: 6 of 6 prompts diverge" in f["reason"]
    assert results["baseline"]["status"] == "ok"
    assert results["baseline"]["gates"]["passed"] is True
    assert set(outcome.failed) == {"ddtree-b32-t8-w2048-bs8", "ddtree-b16-t4-w2048-bs8", "ddtree-b4-t4-w2048-bs8"}

    # the baseline ran first and became the lossless reference for everyone after it
    assert rec.calls[0] == "baseline"
    assert measure.references[0] == ("baseline", None)
    assert all(src == "baseline" for _, src in measure.references[1:])
    ref = json.loads(run_dir.lossless_reference.read_text())
    assert ref["label"] == "baseline"

    # every config that reached its gates twice: its production restart, then its lossless gate's own
    # (deterministic inference); one that did not start or whose benchmark failed costs no gate restart
    twice = {c.label for c in plan.configs} - {"ddtree-b32-t8-w2048-bs8", "ddtree-b16-t4-w2048-bs8"}
    assert rec.calls[:-1] == [x for c in plan.configs for x in [c.label] * (2 if c.label in twice else 1)]
    assert rec.deterministic == [d for c in plan.configs for d in ([False, True] if c.label in twice else [False])] + [
        False
    ]
    # the default config was restored at the end, as the inventory deploys it
    assert rec.calls[-1] == "ddtree-b8-t4-w2048-bs8"
    assert rec.restores == [False] * (len(plan.configs) + len(twice)) + [True]
    assert (run_dir.runner_dir("restore-default") / "called").is_file()
    assert run_dir.read_state()["status"] == "complete"
    assert run_dir.read_state()["restore"]["status"] == "ok"
    assert not list(run_dir.path.rglob("*.tmp"))


async def test_no_restore(tmp_path: Path) -> None:
    plan = make_plan(GRID[:2], tmp_path=tmp_path, default=DEFAULT)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    rec = FakeReconfigurer()
    outcome = await _runner(plan, run_dir, rec, FakeMeasure(), restore=False).run()
    assert len(rec.calls) == 2 * 2  # each config: its production restart, then its lossless gate's own
    assert outcome.restore == {"status": "skipped", "reason": "--no-restore"}


@pytest.mark.parametrize("mode", ["shared", "separate"])
async def test_without_a_baseline_no_config_becomes_the_reference(tmp_path: Path, mode: str) -> None:
    """The old loop made the first passing config the reference and compared the others with it: a
    speculative config judged by another one. Only the baseline's outputs are a reference. With the lossless
    gate in its own restart, a config without a reference to compare with is not restarted for it."""
    grid = [g for g in GRID if g.get("algorithm") != "none"]
    plan = make_plan(grid, tmp_path=tmp_path, lossless_mode=mode)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    measure = FakeMeasure()
    measure.lossless_reference_from_anyone = True  # even a measure that offers one: the loop keeps none
    rec = FakeReconfigurer()
    await _runner(plan, run_dir, rec, measure, restore=False).run()
    assert all(src is None for _, src in measure.references)
    assert not run_dir.lossless_reference.exists()
    if mode == "shared":
        assert len(measure.references) == len(grid) and rec.deterministic == [True] * len(grid)
    else:  # no gate restart: it could judge nothing
        assert measure.references == [] and rec.deterministic == [False] * len(grid)
        for doc in run_dir.results():
            lossless = doc["gates"]["lossless"]
            assert (lossless["verdict"], lossless["restart"]) == ("no_baseline", "none")
            assert "no baseline reference to compare with" in doc["failure"]["reason"]
            assert "its restart with deterministic inference was not made" in lossless["reason"]


async def test_the_server_log_fails_a_config_whose_outputs_matched(tmp_path: Path) -> None:
    """The invocation's journal shows the KV-window invariant: gate_failed, whatever the outputs said."""
    plan = make_plan(GRID[:2], tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    rec = FakeReconfigurer()
    label = plan.configs[1].label
    rec.log[label] = ["INFO decode", "RuntimeError: DDTree KV window overrun: batch row 1 would write KV slots 9..17"]
    await _runner(plan, run_dir, rec, FakeMeasure(), restore=False).run()
    doc = json.loads(run_dir.result(label).read_text())
    assert doc["status"] == "failed" and doc["failure"]["class"] == "gate_failed"
    assert "KV-window invariant failing" in doc["failure"]["reason"]
    assert doc["gates"]["lossless"]["server_log"]["scanned"] is True
    base = json.loads(run_dir.result(plan.configs[0].label).read_text())
    assert base["gates"]["lossless"]["server_log"] == {  # its lossless gate's own restart (inv-1: its production)
        "scanned": True, "source": "journal of invocation inv-2", "lines": 0, "invariant": [], "tracebacks": [],
        "passed": True, "reason": None,
    }
    assert base["lossless_reconfigure"]["invocation_id"] == "inv-2" and base["reconfigure"]["invocation_id"] == "inv-1"


async def test_interrupt_then_resume_does_not_repeat_finished_configs(tmp_path: Path) -> None:
    plan = make_plan(GRID, tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    holder: dict[str, SweepRunner] = {}

    def interrupt_on_third(cfg: PlannedConfig, n: int) -> None:
        if n == 5:  # Ctrl-C while the third config restarts (two restarts per config)
            loop = holder["runner"].loop
            assert loop is not None
            loop.call_soon_threadsafe(holder["runner"]._on_sigint)

    rec = FakeReconfigurer(hook=interrupt_on_third)
    runner = _runner(plan, run_dir, rec, FakeMeasure())
    holder["runner"] = runner
    outcome = await runner.run()
    assert outcome.interrupted
    done = set(_results(run_dir))
    assert len(done) == 2 and done == set(rec.calls[:4])
    assert run_dir.read_state()["status"] == "interrupted"
    assert state.latest_resumable(tmp_path / "results") == run_dir.path

    rec2 = FakeReconfigurer()
    outcome2 = await _runner(plan, run_dir, rec2, FakeMeasure()).run()
    assert not outcome2.interrupted
    assert set(outcome2.skipped) == done
    assert set(rec2.calls).isdisjoint(done)
    assert len(rec2.calls) == 2 * (len(GRID) - 2)
    assert set(_results(run_dir)) == {c.label for c in plan.configs}
    assert run_dir.read_state()["status"] == "complete"
    assert state.latest_resumable(tmp_path / "results") is None


async def test_resume_reruns_changed_fingerprints_and_optionally_failed(tmp_path: Path) -> None:
    plan = make_plan(GRID[:3], tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    await _runner(plan, run_dir, FakeReconfigurer(fail={"baseline": "boom"}), FakeMeasure()).run()
    # tamper with one recorded fingerprint: as if the patch series changed since
    label = "ddtree-b16-t4-w2048-bs8"
    doc = run_dir.read_result(label)
    assert doc is not None
    doc["fingerprint"]["patch_series_sha256"] = "0" * 64
    run_dir.result(label).write_text(json.dumps(doc), encoding="utf-8")

    rec = FakeReconfigurer()
    await _runner(plan, run_dir, rec, FakeMeasure()).run()
    # the failed baseline is a finished result, not rerun by default; it made no reference, so no gate restart
    assert rec.calls == [label] and rec.deterministic == [False]

    rec = FakeReconfigurer()
    await _runner(plan, run_dir, rec, FakeMeasure(), retry_failed=True).run()
    # every failed config again: the baseline, and the two that had no reference to be judged against
    assert rec.calls == [x for c in plan.configs for x in (c.label, c.label)]
    assert all(d["status"] == "ok" for d in run_dir.results())
    decision = state.decide(run_dir, label, {"host": "other"})
    assert decision.run and "host" in decision.reason


async def test_result_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = make_plan(GRID[:1], tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    await _runner(plan, run_dir, FakeReconfigurer(), FakeMeasure()).run()
    label = plan.configs[0].label
    before = run_dir.result(label).read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        await _runner(plan, run_dir, FakeReconfigurer(), FakeMeasure(), retry_failed=True).run_config_and_write(
            plan.configs[0]
        )
    monkeypatch.undo()
    assert run_dir.result(label).read_bytes() == before  # the old result is intact
    assert not list(run_dir.configs.glob("*.tmp")) and not list(run_dir.configs.glob(".*"))


async def test_ctrl_c_during_the_restore_leaves_a_resumable_run_that_restores_again(tmp_path: Path) -> None:
    plan = make_plan(GRID[:2], tmp_path=tmp_path, default=DEFAULT)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    holder: dict[str, SweepRunner] = {}

    def interrupt_restore(cfg: PlannedConfig, n: int) -> None:
        if n == 5:  # the two configs (two restarts each), then the restore
            loop = holder["runner"].loop
            assert loop is not None
            loop.call_soon_threadsafe(holder["runner"]._on_sigint)

    runner = _runner(plan, run_dir, FakeReconfigurer(hook=interrupt_restore), FakeMeasure())
    holder["runner"] = runner
    outcome = await runner.run()
    assert outcome.interrupted and len(_results(run_dir)) == 2
    assert run_dir.read_state()["status"] == "interrupted"

    rec = FakeReconfigurer()
    outcome = await _runner(plan, run_dir, rec, FakeMeasure()).run()
    assert not outcome.interrupted
    assert rec.calls == ["ddtree-b8-t4-w2048-bs8"]  # only the restore
    assert run_dir.read_state()["status"] == "complete"


class _SkippingMeasure(FakeMeasure):
    """Gates only the labels in ``gate``; the others are recorded as not gated (as a tuner does)."""

    def __init__(self, gate: set[str]) -> None:
        super().__init__()
        self.gate = gate

    async def gates(self, endpoint: Any, cfg: PlannedConfig, reference: Any, **kwargs: Any) -> dict[str, Any]:
        if cfg.label not in self.gate:
            return {"skipped": True, "passed": False, "reason": "not gated: dropped at the screen"}
        return await super().gates(endpoint, cfg, reference, **kwargs)


async def test_a_config_the_measure_does_not_gate_is_ok_but_never_a_winner(tmp_path: Path) -> None:
    from repro_py.report.render import build_report  # noqa: PLC0415

    plan = make_plan(GRID[:3], tmp_path=tmp_path)  # b8/t4, baseline, b16/t4
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    measure = _SkippingMeasure({"baseline", "ddtree-b8-t4-w2048-bs8"})
    measure.tps = {"ddtree-b16-t4-w2048-bs8": 500.0, "ddtree-b8-t4-w2048-bs8": 200.0}  # b16: fastest, never gated
    await _runner(plan, run_dir, FakeReconfigurer(), measure).run()
    docs = _results(run_dir)
    skipped = docs["ddtree-b16-t4-w2048-bs8"]
    assert skipped["status"] == "ok" and skipped["failure"] is None
    assert skipped["gates"] == {"skipped": True, "passed": False, "reason": "not gated: dropped at the screen"}
    build_report(run_dir.path)
    summary = (run_dir.path / "summary.md").read_text()
    assert "| ddtree-b16-t4-w2048-bs8 (SIMULATED x1) | T=0 (greedy), top_p=1 | ok | not run |" in summary
    assert "| single-stream latency | ddtree-b8-t4-w2048-bs8 |" in summary
