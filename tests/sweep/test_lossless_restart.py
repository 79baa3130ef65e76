"""The lossless gate in its own restart (``--lossless-restart separate``, the default) or in the benchmark's
(``shared``): what each restart really ran, what the figures say they were measured under, resume between the two
restarts, a gate restart that fails, and the restore."""

from __future__ import annotations

import csv
import io
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from repro_py.atomicio import write_json_atomic
from repro_py.exitcodes import ExitCode
from repro_py.report.plots import figure_title
from repro_py.report.tables import load_run
from repro_py.simengine.process import free_port
from repro_py.sweep import cli, state
from repro_py.sweep.extravars import DETERMINISTIC_VAR
from repro_py.sweep.grid import PlannedConfig, validate_config
from repro_py.sweep.localproc import LocalProcessReconfigurer
from repro_py.sweep.runner import SweepOptions, SweepRunner
from tests.report.test_report import png_text
from tests.sweep.conftest import BUNDLE, FakeMeasure, FakeReconfigurer, make_plan
from tests.sweep.test_cli import write_inventory

GRID: list[dict[str, object]] = [
    {"algorithm": "none"},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
]
TREE = "ddtree-b8-t4-w2048-bs8"
BENCH = ["--bench-contexts", "60", "--bench-concurrency", "1", "2", "--repeats", "1", "--max-tokens", "16"]
DET_FLAG = "--enable-deterministic-inference"


def _args(run_dir: Path) -> list[str]:
    """The command line the local reconfigurer started that engine with."""
    args: list[str] = json.loads((run_dir / "engine-args.json").read_text())
    return args


def _sweep(tmp_path: Path, run_id: str, *extra: str) -> tuple[int, state.RunDir]:
    inv = write_inventory(tmp_path / "inv.yml", grid=GRID)
    results = tmp_path / "results"
    code = cli.main([str(inv), "--reconfigurer", "local", "--results", str(results), "--run-id", run_id, *BENCH,
                     *extra])  # fmt: skip
    return code, state.RunDir(results / run_id)


def test_the_figures_come_from_the_deployed_config_and_the_lossless_gate_from_its_own_deterministic_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run = _sweep(tmp_path, "sep")
    out = " ".join(capsys.readouterr().out.split())
    assert code == ExitCode.OK
    docs = {d["label"]: d for d in run.results()}
    assert set(docs) == {"baseline", TREE} and all(d["status"] == "ok" for d in docs.values())
    for label, doc in docs.items():
        # the benchmark's engine: exactly what the inventory deploys (its command line and its own /server_info)
        assert DET_FLAG not in _args(run.runner_dir(label))
        assert doc["reconfigure"]["server_info_echo"]["enable_deterministic_inference"] is False
        assert doc["engine"]["deterministic_inference"] is False
        # the lossless gate's engine: its own restart, with deterministic inference, recorded with its invocation
        gate = doc["lossless_reconfigure"]
        assert gate["server_info_echo"]["enable_deterministic_inference"] is True and gate["status"] == "ready"
        assert DET_FLAG in _args(run.gate_runner_dir(label))
        assert gate["invocation_id"] != doc["reconfigure"]["invocation_id"]
        assert gate["unit_sha256"] != doc["reconfigure"]["unit_sha256"] and gate["time_to_ready_s"] > 0
        lossless = doc["gates"]["lossless"]
        assert lossless["restart"] == "own" and lossless["deterministic"]["server"] is True
        assert lossless["server_log"]["source"] == f"journal of invocation {gate['invocation_id']}"
        assert doc["lossless_restart"] == "separate" and doc["timing"]["lossless_reconfigure_s"] > 0
    assert docs[TREE]["gates"]["lossless"]["verdict"] == "lossless"
    assert docs[TREE]["gates"]["lossless"]["deterministic"] == {"server": True, "reference": True}
    assert DET_FLAG not in _args(run.runner_dir("restore-default"))  # the inventory does not deploy it
    assert run.partial_labels() == [] and not list((run.path / "partial").glob("*.json"))
    plan = json.loads(run.plan.read_text())["lossless_restart"]
    assert plan["mode"] == "separate" and plan["restarts_per_config"] == 2 and plan["figures_deterministic"] is False
    summary = (run.path / "summary.md").read_text()
    assert summary.splitlines()[0] == "# SIMULATED sweep report: sep"
    assert "| inference | every figure from the config as deployed (no deterministic inference); " in summary
    # the sampled gate on the production restart, the lossless gate on its own
    sampled = r"same_distribution \(p=[0-9.]+\)"
    row = rf"\| {TREE} \| T=0 \(greedy\), top_p=1 \| pass \| lossless \| {sampled} \| clean \| 14/14 \|"
    assert re.search(row, summary), summary
    assert summary.count("| own |") == 2 and "deterministic inference, --lossless-restart" not in summary
    assert "lossless gate: --lossless-restart separate: two restarts per config" in out
    assert "restarts: 5 (2 configs x 2, each config's lossless gate in a restart of its own, plus the restore)" in out


def test_shared_mode_says_deterministic_inference_on_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, run = _sweep(tmp_path, "shr", "--lossless-restart", "shared")
    out = " ".join(capsys.readouterr().out.split())
    assert code == ExitCode.OK
    assert "lossless gate: --lossless-restart shared: one restart per config" in out
    assert "restarts: 3 (2 configs x 1, plus the restore)" in out
    docs = {d["label"]: d for d in run.results()}
    for label, doc in docs.items():
        assert doc["status"] == "ok" and doc["lossless_restart"] == "shared" and "lossless_reconfigure" not in doc
        assert doc["engine"]["deterministic_inference"] is True
        assert doc["reconfigure"]["server_info_echo"]["enable_deterministic_inference"] is True
        assert DET_FLAG in _args(run.runner_dir(label)) and not run.gate_runner_dir(label).exists()
        assert doc["gates"]["lossless"]["restart"] == "shared"
    assert DET_FLAG not in _args(run.runner_dir("restore-default"))
    label = "deterministic inference, --lossless-restart shared"
    summary = (run.path / "summary.md").read_text()
    assert summary.splitlines()[0] == f"# SIMULATED sweep report: shr ({label})"
    for heading in ("Recommendation", "Results", "Failed cells and repeats", "Plots"):
        assert f"## {heading} ({label})" in summary
    assert f"Sampling T=0 (greedy), top_p=1, {label}:" in summary  # the winners table and the plot set
    assert f"These rankings ({label}) come from figures measured with batch-invariant kernels" in summary
    assert "| inference | every figure under deterministic inference, not necessarily the production config" in summary
    assert summary.count(" | deterministic |") == 2  # each row of the results table
    rows = list(csv.DictReader(io.StringIO((run.path / "summary.csv").read_text())))
    assert {(r["deterministic_inference"], r["lossless_restart"], r["lossless_gate_restart"]) for r in rows} == {
        ("true", "shared", "shared")
    }
    for png in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert png_text(run.path / "plots" / f"{png}.png")["Title"].endswith(f"; {label}")
    assert figure_title("x", load_run(run.path)).splitlines()[1] == f"sampling T=0 (greedy), top_p=1, {label}"
    assert json.loads(run.plan.read_text())["lossless_restart"]["figures_deterministic"] is True


def test_off_is_not_a_mode_and_a_resumed_run_keeps_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = write_inventory(tmp_path / "inv.yml", grid=GRID)
    with pytest.raises(SystemExit) as exc:
        cli.main([str(inv), "--lossless-restart", "off", "--dry-run"])
    assert exc.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "argument --lossless-restart: invalid choice: 'off'" in err and "separate" in err and "shared" in err
    run_dir = tmp_path / "results" / "r1"
    run_dir.mkdir(parents=True)
    plan = {"run_id": "r1", "host": "simhost", "configs": [{"label": "baseline", "config": {"algorithm": "none"}}]}
    (run_dir / "plan.json").write_text(json.dumps({**plan, "lossless_restart": {"mode": "shared"}}))
    resume = [str(inv), "--results", str(tmp_path / "results"), "--resume", "--run-id", "r1", "--dry-run"]
    assert cli.main([*resume, "--lossless-restart", "separate"]) == ExitCode.USAGE
    assert "run r1 measures with --lossless-restart shared; --lossless-restart separate differs" in " ".join(
        capsys.readouterr().err.split()
    )
    assert cli.main(resume) == ExitCode.OK
    assert "--lossless-restart shared: one restart per config" in " ".join(capsys.readouterr().out.split())
    (run_dir / "plan.json").write_text(json.dumps(plan))  # planned before the option: every config deterministic
    assert cli.main(resume) == ExitCode.USAGE
    assert "pass --lossless-restart shared to continue it as it ran" in " ".join(capsys.readouterr().err.split())
    assert cli.main([*resume, "--lossless-restart", "shared"]) == ExitCode.OK


def _runner(plan: Any, run_dir: state.RunDir, rec: Any, measure: Any, **options: Any) -> SweepRunner:
    return SweepRunner(plan, run_dir, rec, measure, bundle=BUNDLE, options=SweepOptions(**options),
                       console=Console(quiet=True))  # fmt: skip


async def test_resume_between_the_two_restarts_runs_only_the_second(tmp_path: Path) -> None:
    """Ctrl-C during the config's lossless gate restart: its production figures are kept (partial/), --resume
    restarts it once (the gate's), never benchmarks it again, and its result holds both."""
    plan = make_plan(GRID, tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    holder: dict[str, SweepRunner] = {}

    def interrupt_the_tree_gate(cfg: PlannedConfig, n: int) -> None:
        if cfg.label == TREE and rec.deterministic[-1]:
            loop = holder["runner"].loop
            assert loop is not None
            loop.call_soon_threadsafe(holder["runner"]._on_sigint)

    rec = FakeReconfigurer(hook=interrupt_the_tree_gate)
    measure = FakeMeasure(tps={TREE: 321.0})
    holder["runner"] = _runner(plan, run_dir, rec, measure)
    outcome = await holder["runner"].run()
    assert outcome.interrupted and [d["label"] for d in run_dir.results()] == ["baseline"]
    assert rec.calls == ["baseline", "baseline", TREE, TREE] and rec.deterministic == [False, True, False, True]
    assert measure.benched == ["baseline", TREE]
    assert run_dir.partial_labels() == [TREE]
    partial = json.loads(run_dir.partial(TREE).read_text())
    assert partial["stages_done"] == ["production"] and partial["result"]["bench"]["cells"]

    rec2, measure2 = FakeReconfigurer(), FakeMeasure(tps={TREE: 999.0})
    outcome2 = await _runner(plan, run_dir, rec2, measure2).run()
    assert not outcome2.interrupted and outcome2.skipped == ["baseline"] and outcome2.ran == [TREE]
    assert rec2.calls == [TREE] and rec2.deterministic == [True]  # only the gate's restart; no restore configured
    assert measure2.benched == [] and measure2.gated == [(TREE, ("lossless",))]
    doc = run_dir.read_result(TREE)
    assert doc is not None and doc["status"] == "ok" and doc["gates"]["passed"] is True
    first = partial["result"]
    assert doc["bench"] == first["bench"] and doc["reconfigure"] == first["reconfigure"]  # the figures: kept
    assert doc["bench"]["cells"][0]["median"]["output_tps"] == 321.0  # measured once, in the first session
    assert doc["gates"]["coding"] == first["gates"]["coding"] and doc["gates"]["lossless"]["restart"] == "own"
    assert doc["lossless_reconfigure"]["invocation_id"] == "inv-1"  # the second session's restart
    assert doc["started_at"] == first["started_at"] and doc["wall_s"] >= first["wall_s"]
    assert run_dir.partial_labels() == [] and not run_dir.partial(TREE).exists()
    assert run_dir.read_state()["status"] == "complete"


async def test_a_partial_of_another_fingerprint_is_measured_again(tmp_path: Path) -> None:
    plan = make_plan(GRID, tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    run_dir.partial(TREE).parent.mkdir(parents=True)
    run_dir.partial(TREE).write_text(json.dumps({
        "schema": 1, "label": TREE, "mode": "separate", "stages_done": ["production"],
        "controller_fingerprint": {"host": "elsewhere"}, "result": {},
    }))  # fmt: skip
    rec = FakeReconfigurer()
    await _runner(plan, run_dir, rec, FakeMeasure()).run()
    assert rec.calls == ["baseline", "baseline", TREE, TREE]  # whole again: nothing of another host is kept
    assert rec.deterministic == [False, True, False, True]
    assert not run_dir.partial(TREE).exists()


async def test_a_gate_restart_that_does_not_start_is_the_lossless_gates_failure_with_its_cause(
    tmp_path: Path,
) -> None:
    """The simulated engine refuses deterministic inference with the torch_native attention backend (sglang
    0.5.23's own words): the production restart serves and is measured, the gate's restart exits at startup, and the
    config is gate_failed with that cause and that restart's log, its figures kept."""
    port = free_port()
    plan = make_plan(GRID[1:], tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    reference = {"source": "baseline", "outputs": {"p": [1, 2, 3]}}  # the baseline's, from an earlier session
    write_json_atomic(run_dir.lossless_reference, {"label": "baseline", "config": {}, "reference": reference})
    local = LocalProcessReconfigurer(port, load_s=0.2, warmup_s=0.1, extra_args=["--attention-backend", "torch_native"])
    try:
        await _runner(plan, run_dir, local, FakeMeasure(), restore=False).run()
    finally:
        local.close()
    doc = run_dir.read_result(TREE)
    assert doc is not None and doc["status"] == "failed"
    failure = doc["failure"]
    assert failure["class"] == "gate_failed"
    assert failure["reason"].startswith("lossless: its restart with deterministic inference did not serve "
                                        "(failed_to_start): the engine exited during startup")  # fmt: skip
    assert any("but you explicitly specified 'torch_native'" in line for line in failure["journal"])
    assert doc["reconfigure"]["status"] == "ready" and doc["bench"]["cells"]  # the production figures, kept
    assert doc["lossless_reconfigure"]["status"] == "failed"
    assert doc["gates"]["lossless"]["verdict"] == "restart_failed" and doc["gates"]["coding"]["passed"] is True
    assert DET_FLAG not in _args(run_dir.runner_dir(TREE)) and DET_FLAG in _args(run_dir.gate_runner_dir(TREE))


async def test_an_inventory_that_deploys_deterministic_inference_needs_one_restart_per_config(tmp_path: Path) -> None:
    plan = make_plan(GRID, tmp_path=tmp_path, hostvars={DETERMINISTIC_VAR: True})
    assert plan.lossless_restart.restarts_per_config == 1 and plan.estimate["restarts"] == 3
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    rec, measure = FakeReconfigurer(), FakeMeasure()
    await _runner(plan, run_dir, rec, measure, restore=False).run()
    assert rec.calls == ["baseline", TREE] and rec.deterministic == [False, False]  # the inventory's own value
    assert [which for _, which in measure.gated] == [("coding", "config_echo", "lossless", "sampled")] * 2
    docs = {d["label"]: d for d in run_dir.results()}
    assert all(d["gates"]["lossless"]["restart"] == "production" and "lossless_reconfigure" not in d
               for d in docs.values())  # fmt: skip


def test_the_restore_carries_deterministic_inference_only_when_the_inventory_sets_it(tmp_path: Path) -> None:
    cfg = validate_config({"budget": 8, "topk": 4, "window": 2048}, simulated=True)
    for deployed in (False, True):
        local = LocalProcessReconfigurer(free_port(), load_s=0.1, warmup_s=0.05, inventory_deterministic=deployed)
        private = tmp_path / f"restore-{deployed}"
        try:
            outcome = local.reconfigure(cfg, private, threading.Event(), restore=True, deterministic=True)
        finally:
            local.close()
        assert outcome.ok and (DET_FLAG in _args(private)) is deployed
        assert outcome.server_info_echo is not None
        assert outcome.server_info_echo["enable_deterministic_inference"] is deployed
