"""The tuner and the lossless gate's own restart: every restart counted against --max-restarts (a gated config
takes two, a dropped one one), a config interrupted between its two restarts finished first on --resume, and
--lossless-restart shared labelled in the plan and both reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.lossless_restart import restarts_of
from repro_py.tune import proposals
from repro_py.tune.cli import main
from repro_py.tune.loop import Budget, TuneLoop
from tests.sweep.conftest import FakeReconfigurer
from tests.tune.conftest import make_loop
from tests.tune.fakes import ModelMeasure
from tests.tune.test_cli import SPACE, inventory  # noqa: F401 (the fixture)


def _calls(rec: FakeReconfigurer) -> dict[str, list[bool]]:
    """Per measured config, the deterministic flag of each of its restarts (the restore left out)."""
    out: dict[str, list[bool]] = {}
    for label, det, restore in zip(rec.calls, rec.deterministic, rec.restores, strict=True):
        if not restore:
            out.setdefault(label, []).append(det)
    return out


async def test_every_restart_counts_a_gated_config_two_and_a_dropped_one_one(tmp_path: Path) -> None:
    rec = FakeReconfigurer()
    loop = make_loop(tmp_path, reconfigurer=rec, budget=Budget(max_restarts=11))
    outcome = await loop.run()
    docs = {d["label"]: d for d in loop.run_dir.results()}
    calls = _calls(rec)
    for label, doc in docs.items():
        gated = doc["gates"].get("skipped") is not True
        assert calls[label] == ([False, True] if gated else [False]), label  # production first, then the gate's
        assert restarts_of(doc) == len(calls[label]) and loop.restarts[label] == len(calls[label])
    assert {label for label, doc in docs.items() if doc["gates"].get("skipped") is not True} >= {"baseline"}
    assert any(doc["gates"].get("skipped") for doc in docs.values())  # some dropped at the screen: one restart each
    assert outcome.restarts == len(rec.calls) == loop.restarts_used() + 1 <= 11
    # the budget spent to the last restart (the current config's second one fits where a gated config would not),
    # or stopped with the one left unused because a gated config might take two
    assert outcome.restarts == 11 or "a config may take 2 (its lossless gate's own restart)" in outcome.stop_reason

    shared = FakeReconfigurer()
    loop2 = make_loop(tmp_path, reconfigurer=shared, budget=Budget(max_restarts=11), run="shared",
                      lossless_mode="shared")  # fmt: skip
    outcome2 = await loop2.run()
    assert all(flags == [True] for flags in _calls(shared).values())  # one restart each, deterministic
    assert outcome2.restarts == len(shared.calls) == 11 and "a config may take" not in outcome2.stop_reason


async def test_resume_finishes_a_config_between_its_two_restarts_first(tmp_path: Path) -> None:
    holder: dict[str, TuneLoop] = {}

    def interrupt_at_the_second_gate_restart(cfg: PlannedConfig, n: int) -> None:
        if rec.deterministic[-1] and cfg.label != "baseline":
            runner = holder["loop"].runner
            assert runner.loop is not None
            runner.loop.call_soon_threadsafe(runner._on_sigint)

    rec = FakeReconfigurer(hook=interrupt_at_the_second_gate_restart)
    measure = ModelMeasure(5)
    loop = make_loop(tmp_path, reconfigurer=rec, measure=measure, budget=Budget(max_restarts=9))
    holder["loop"] = loop
    assert (await loop.run()).interrupted
    victim = rec.calls[-1]
    assert rec.deterministic[-1] and loop.run_dir.partial_labels() == [victim]
    assert loop.run_dir.read_result(victim) is None
    benched = [c for c in measure.bench_calls if c[0] == victim]

    rec2, measure2 = FakeReconfigurer(), ModelMeasure(6)
    loop2 = make_loop(tmp_path, reconfigurer=rec2, measure=measure2, budget=Budget(max_restarts=9))
    outcome = await loop2.run()
    assert (rec2.calls[0], rec2.deterministic[0]) == (victim, True)  # only its gate's restart, first
    assert _calls(rec2)[victim] == [True] and not [c for c in measure2.bench_calls if c[0] == victim]
    doc = loop2.run_dir.read_result(victim)
    assert doc is not None and doc["gates"]["passed"] is True and restarts_of(doc) == 2
    assert [c for c in measure.bench_calls if c[0] == victim] == benched  # measured once, in the first session
    rec_ = loop2.search.records[victim]
    assert rec_.order == 2 and rec_.last_rung == "full" and rec_.gates == "pass"  # replayed from its result
    assert outcome.restarts == 2 + 2 + len(rec2.calls) - 1 and outcome.restarts <= 9  # every session's, counted
    assert loop2.run_dir.partial_labels() == []


@pytest.mark.parametrize(("mode", "least"), [("separate", 8), ("shared", 5)])
def test_a_budget_that_cannot_hold_one_gated_config_is_refused(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, least: int  # noqa: F811
) -> None:
    """The baseline, the current config's two restarts, the restore and one candidate: each gated one with its
    lossless gate's own restart under ``separate``."""
    code = main([str(inventory), "--objective", "single-stream", "--max-restarts", str(least - 1),
                 "--lossless-restart", mode, "--results", str(tmp_path / "r"), "--reconfigurer", "local"])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == ExitCode.USAGE and "nothing was restarted" in err
    assert f"--max-restarts {least - 1} is too small for this run" in err and f"allowed: {least} or more" in err
    assert not (tmp_path / "r").exists()


def test_shared_mode_is_labelled_in_the_plan_and_both_reports(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    space = tmp_path / "space.yml"
    space.write_text(yaml.safe_dump(SPACE))
    results = tmp_path / "results"
    args = [str(inventory), "--objective", "single-stream", "--space", str(space), "--reconfigurer", "local",
            "--results", str(results), "--run-id", "s", "--max-tokens", "16", "--screen-tokens", "8", "--repeats",
            "1", "--screen-repeats", "1", "--max-restarts", "5", "--lossless-restart", "shared",
            "--no-write"]  # fmt: skip
    assert main(args) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "lossless gate │ --lossless-restart shared: one restart per config" in out
    assert "figures │ deterministic inference (--lossless-restart shared: not the production config)" in out
    label = "deterministic inference, --lossless-restart shared"
    run = results / "s"
    report = (run / "tune" / "report.md").read_text()
    assert report.splitlines()[0] == f"# SIMULATED tuning report: s ({label})"
    assert f"## Winners ({label})" in report and f"Winners at sampling T=0 (greedy), top_p=1, {label}:" in report
    assert f"These rankings ({label}) come from figures measured with batch-invariant kernels" in report
    assert f"## The search, restart by restart ({label})" in report and f"## Plots ({label})" in report
    assert "| restarts | 5 (budget 5 restarts, the final restore included; every lossless gate's own restart" in report
    assert f"# SIMULATED sweep report: s ({label})" in (run / "summary.md").read_text()
    settings = json.loads((run / "tune" / "settings.json").read_text())
    assert settings["lossless_restart"] == {"mode": "shared"}
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    # the baseline, the current config, one candidate, the current config's second restart: one restart each
    assert len(docs) == 4 and all(d["engine"]["deterministic_inference"] is True for d in docs)
    # a resumed run keeps its mode; another is refused before anything restarts
    resume = [str(inventory), "--resume", "--run-id", "s", "--results", str(results), "--reconfigurer", "local",
              "--lossless-restart", "separate", "--no-write"]  # fmt: skip
    assert main(resume) == ExitCode.USAGE
    assert "measures with --lossless-restart shared" in " ".join(capsys.readouterr().err.split())


async def test_a_gated_candidate_never_crowds_out_the_current_config_s_second_restart(tmp_path: Path) -> None:
    """With two restarts left for configs and the second restart of the current config still owed, a candidate
    that may take two (its lossless gate's own restart) would leave none: the repeat goes first."""
    preview = make_loop(tmp_path / "preview").search
    order = []
    while len(order) < 3 and (proposal := proposals.propose(preview)) is not None:
        order.append(preview.start(proposal).label)
    assert order[:2] == ["baseline", "ddtree-b8-t4-w2048-bs8"], order
    # the first candidate fails to start (one restart): 8 - 2 - 2 - 1 - 1 (the restore) leaves two
    rec = FakeReconfigurer(fail={order[2]: "the engine exited during startup (exit code 1)"})
    loop = make_loop(tmp_path, reconfigurer=rec, budget=Budget(max_restarts=8))
    outcome = await loop.run()
    labels = [r.label for r in loop.search.records.values()]
    assert labels[:4] == [*order, "ddtree-b8-t4-w2048-bs8.r2"], labels
    assert loop.search.noise.between().dof == 1 and outcome.restarts <= 8
    assert "a config may take 2 (its lossless gate's own restart)" in outcome.stop_reason
