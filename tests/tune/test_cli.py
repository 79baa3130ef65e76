"""``python -m repro_py.tune``: refusals before anything restarts, --dry-run, and a real run on local engines."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sweep import restarter
from repro_py.sweep.lossless_restart import restarts_of
from repro_py.tune import cli as tune_cli
from repro_py.tune.cli import main

ROOT = Path(__file__).resolve().parents[2]
SPACE = {
    "configs": [{"algorithm": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [5, 8], "topk": [1, 4], "window": [2048], "block_size": [8]},
}


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """A copy of inventory/local with the simulated engine sped up (write-back lands in the copy)."""
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventory" / "local", inv)
    service = inv / "group_vars" / "all" / "service.yml"
    doc = yaml.safe_load(service.read_text())
    doc.update(
        sglang_service_sim_speed=20.0, sglang_service_sim_load_seconds=0.3, sglang_service_sim_warmup_seconds=0.1
    )
    service.write_text("---\n" + yaml.safe_dump(doc))
    return inv


def _set_current_config(inventory: Path, config: dict[str, object], role: dict[str, object]) -> None:
    """The config the inventory's host runs: the sweep's default config and the service role's variables."""
    for name, values in (("sweep.yml", {"sweep_default_config": config}), ("service.yml", role)):
        path = inventory / "group_vars" / "all" / name
        doc = yaml.safe_load(path.read_text())
        doc.update(values)
        path.write_text("---\n" + yaml.safe_dump(doc))


class _NoAnsible:
    """Stands in for the Ansible reconfigurer: a run made with --reconfigurer local must never reach it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the Ansible reconfigurer was used for a run made with --reconfigurer local")


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "space.yml"
    path.write_text(yaml.safe_dump(SPACE))
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--objective", "latency"], "--objective 'latency' is not known; allowed: single-stream, throughput"),
        (["--objective", "single-stream", "--slo", "p99<3"], "--slo 'p99<3': expected METRIC<=VALUE"),
        (["--objective", "single-stream", "--max-restarts", "1"], "--max-restarts 1: at least 2"),
        (["--objective", "single-stream", "--screen-tokens", "900"], "--screen-tokens 900 must not exceed"),
        (["--objective", "single-stream", "--confidence", "1.5"], "confidence=1.5 must be in 0.5..1"),
        (["--objective", "single-stream", "--run-id", "a/b"], "--run-id 'a/b'"),
        ([], "--objective is required"),
    ],
)
def test_bad_input_is_refused_before_anything_restarts(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code = main([str(inventory), "--results", str(tmp_path / "results"), "--reconfigurer", "local", *extra])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert "nothing was restarted" in err and message in " ".join(err.split())
    assert not (tmp_path / "results").exists()


def test_an_invalid_space_is_refused_naming_the_config(inventory: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("configs: [{algorithm: ddtree, budget: 4, topk: 8}]\n")
    assert main([str(inventory), "--objective", "single-stream", "--space", str(bad)]) == ExitCode.USAGE
    assert "topk=8 is out of range (topk must be <= budget=4)" in capsys.readouterr().err


def test_mutually_exclusive_budgets(inventory: Path) -> None:
    assert main([str(inventory), "--objective", "throughput", "--max-restarts", "4", "--max-hours", "1"]) == 2


def test_dry_run_validates_and_estimates_without_a_run(inventory: Path, tmp_path: Path, capsys) -> None:
    code = main([str(inventory), "--objective", "single-stream,throughput", "--dry-run", "--results",
                 str(tmp_path / "r")])  # fmt: skip
    out = " ".join(capsys.readouterr().out.split())
    assert code == ExitCode.OK
    assert "SIMULATED tuning plan" in out and "633 configs, validated (built-in default space)" in out
    assert "12 restarts (final restore and the lossless gates' own restarts included)" in out
    # a gated config is restarted twice: as deployed for its figures, then with deterministic inference for its
    # lossless gate; the plan says so and counts it (the full grid: 633 configs x 2, plus the restore)
    assert "--lossless-restart separate: two restarts per config" in out
    assert "the full grid of this space" in out and "1267 restarts" in out
    assert "baseline, ddtree-b8-t4-w2048-bs8" in out  # the reference, then the deployed config
    assert not (tmp_path / "r").exists()


def test_a_real_run_on_local_engines_reports_resumes_and_writes_back(
    inventory: Path, space_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    # the host runs the autoregressive baseline: the winner beats it beyond doubt, so the write-back is proposed
    _set_current_config(inventory, {"algorithm": "none"}, {"sglang_service_spec_algorithm": "none"})
    monkeypatch.setattr(restarter, "AnsibleReconfigurer", _NoAnsible)
    results = tmp_path / "results"
    args = [str(inventory), "--objective", "single-stream", "--space", str(space_file), "--reconfigurer", "local",
            "--results", str(results), "--run-id", "t", "--max-tokens", "48", "--screen-tokens", "16", "--repeats",
            "2", "--max-restarts", "8", "--slo", "itl_p99_ms<=100000"]  # fmt: skip
    assert main([*args, "--no-write"]) == ExitCode.OK
    captured = capsys.readouterr()
    run = results / "t"
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "complete" and state["restore"]["status"] == "ok"
    settings = json.loads((run / "tune" / "settings.json").read_text())
    assert settings["reconfigurer"] == "local" and settings["extra_vars"] == {}
    search = json.loads((run / "tune" / "search.json").read_text())
    (winner,) = search["winners"]  # an ITL SLO every config meets leaves a winner
    assert winner["label"], winner["note"]
    assert winner["estimate"]["low"] < winner["estimate"]["mean"] < winner["estimate"]["high"]
    assert search["surrogates"]["single-stream"]["mode"] == "acceptance/step"  # read the client's chunk gaps
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    # every restart counted: one per config, one more for each gated config's lossless gate, and the restore
    assert search["restarts"] == 1 + sum(restarts_of(d) for d in docs) <= 8
    assert search["configs_measured"] == len(docs) >= 4
    gated = [d for d in docs if not d["gates"].get("skipped")]
    assert gated and all(d["lossless_reconfigure"]["deterministic_inference"] is True for d in gated)
    assert all(d["engine"]["deterministic_inference"] is False for d in docs)  # the figures: as deployed
    assert search["stop_reason"].startswith("restart budget reached")
    # the current config (here the baseline, also the lossless reference) first, two candidates, the current
    # config again when the budget would not reach it later
    labels = [p["label"] for p in search["path"]]
    assert labels[0] == "baseline" and "baseline.r2" in labels, labels  # the budget reached it
    assert search["noise"]["between_restarts"]["restarts"] == 2
    report = (run / "tune" / "report.md").read_text()
    assert report.startswith("# SIMULATED tuning report: t") and winner["label"] in report
    mode = json.loads((run / "plan.json").read_text())["sandbox"]["mode"]
    assert mode in ("bwrap", "namespaces")
    assert f"| coding sandbox | {mode}; modes in the gated results: {mode} |" in report
    assert (run / "tune" / "plots" / "search.png").read_bytes()[:4] == b"\x89PNG"
    assert "SIMULATED sweep report: t" in (run / "summary.md").read_text()
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run, capture_output=True, check=False)
    assert check.returncode == 0, check.stdout
    # shown, not written; the command printed to write it keeps the run's reconfigurer
    (versus,) = search["versus"]
    assert versus["replace"] and versus["probability"] >= 0.9, versus
    target = inventory / "host_vars" / "sglang-testhost" / "tune.yml"
    out = " ".join(captured.err.split())
    assert "proposed change to the inventory" in out and "+sglang_service_ddtree_budget:" in captured.err
    assert not target.exists()
    hint = next(line for line in captured.err.splitlines() if line.startswith("not written; to write it: "))
    command = shlex.split(hint.removeprefix("not written; to write it: "))
    assert command[:3] == ["python", "-m", "repro_py.tune"] and "--reconfigurer" in command, hint
    assert command[command.index("--reconfigurer") + 1] == "local", hint
    # --resume without --reconfigurer reads the stored one (the Ansible reconfigurer would fail this test)
    before = sorted(p.name for p in (run / "configs").iterdir())
    assert main([str(inventory), "--resume", "--run-id", "t", "--results", str(results), "--no-write"]) == 0
    capsys.readouterr()
    # the printed command, run as printed, restarts nothing and writes the winner
    assert main(command[3:]) == ExitCode.OK
    assert sorted(p.name for p in (run / "configs").iterdir()) == before
    text = target.read_text()
    assert "# run id: t" in text and "# manifest sha256: " in text and "# versus the current config: " in text
    assert "written" in capsys.readouterr().err


def test_the_resume_line_after_ctrl_c_keeps_the_local_reconfigurer(
    inventory: Path, space_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    async def interrupted(self: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_cli.TuneLoop, "run", interrupted)
    args = [str(inventory), "--objective", "single-stream", "--space", str(space_file), "--reconfigurer", "local",
            "--results", str(tmp_path / "r"), "--run-id", "t"]  # fmt: skip
    assert main(args) == ExitCode.INTERRUPTED
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("python -m repro_py.tune "))
    assert line.endswith("--resume --run-id t --results " + str(tmp_path / "r") + " --reconfigurer local"), line
    assert json.loads((tmp_path / "r" / "t" / "tune" / "settings.json").read_text())["reconfigurer"] == "local"


def test_extra_vars_are_refused_where_they_cannot_apply(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([str(inventory), "--objective", "single-stream", "--reconfigurer", "local", "--dry-run",
                 "-e", "sglang_service_sim_speed=50", "--results", str(tmp_path / "r")])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == ExitCode.USAGE, f"exit {code}, not refused: {err}"
    assert "-e/--extra-var sglang_service_sim_speed: extra vars go to the reconfigure play, and --reconfigurer " in err
    assert "local runs none" in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("restarts", "mode", "needs"),
    [
        # --lossless-restart separate: each gated config (the baseline, the current config's first restart, a
        # candidate) takes two restarts, the current config's second restart one
        ("2", "separate", ("2 for the baseline", "3 for the inventory's current config", "2 for at least one", "8")),
        ("7", "separate", ("2 for the baseline", "3 for the inventory's current config", "2 for at least one", "8")),
        ("4", "shared", ("1 for the baseline", "2 for the inventory's current config", "1 for at least one", "5")),
    ],
)
def test_a_budget_too_small_to_measure_the_current_config_is_refused(
    inventory: Path, space_file: Path, capsys: pytest.CaptureFixture[str], restarts: str, mode: str, *,
    needs: tuple[str, str, str, str],
) -> None:
    code = main([str(inventory), "--objective", "single-stream", "--space", str(space_file), "--dry-run",
                 "--max-restarts", restarts, "--lossless-restart", mode])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == ExitCode.USAGE, f"exit {code}, not refused: {err}"
    baseline, current, candidate, least = needs
    assert f"--max-restarts {restarts} is too small for this run: it needs {baseline}" in err
    assert f"{current} ddtree-b8-t4-w2048-bs8" in err and f"{candidate} candidate" in err
    assert f"allowed: {least} or more" in err
    allowed = main([str(inventory), "--objective", "single-stream", "--space", str(space_file), "--dry-run",
                    "--max-restarts", least, "--lossless-restart", mode])  # fmt: skip
    assert allowed == ExitCode.OK, capsys.readouterr().err


def test_resume_without_a_run_id_takes_the_latest_unfinished_tuning_run(
    tmp_path: Path, inventory: Path, capsys
) -> None:
    from repro_py.tune.runsetup import latest_tuning_run  # noqa: PLC0415

    for name, status, stamp, tuning in (
        ("old", "interrupted", "2025-01-01T00:00:00+00:00", True),
        ("new", "interrupted", "2025-01-02T00:00:00+00:00", True),
        ("done", "complete", "2025-01-03T00:00:00+00:00", True),
        ("sweep", "interrupted", "2025-01-04T00:00:00+00:00", False),
    ):
        run = tmp_path / "results" / name
        (run / "tune").mkdir(parents=True)
        (run / "state.json").write_text(json.dumps({"status": status, "updated_at": stamp}))
        if tuning:
            (run / "tune" / "settings.json").write_text("{}")
    assert latest_tuning_run(tmp_path / "results") == tmp_path / "results" / "new"
    assert latest_tuning_run(tmp_path / "none") is None
    assert main([str(inventory), "--resume", "--results", str(tmp_path / "empty")]) == ExitCode.USAGE
    assert "no unfinished tuning run under" in capsys.readouterr().err
