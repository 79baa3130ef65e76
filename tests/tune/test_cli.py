"""``python -m repro_py.tune``: refusals before anything restarts, --dry-run, and a real run on local engines."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sweep.lossless_restart import restarts_of
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
    inventory: Path, space_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    args = [str(inventory), "--objective", "single-stream", "--space", str(space_file), "--reconfigurer", "local",
            "--results", str(results), "--run-id", "t", "--max-tokens", "48", "--screen-tokens", "16", "--repeats",
            "2", "--max-restarts", "8"]  # fmt: skip
    assert main([*args, "--no-write"]) == ExitCode.OK
    captured = capsys.readouterr()
    run = results / "t"
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "complete" and state["restore"]["status"] == "ok"
    search = json.loads((run / "tune" / "search.json").read_text())
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    # every restart counted: one per config, one more for each gated config's lossless gate, and the restore
    assert search["restarts"] == 1 + sum(restarts_of(d) for d in docs) <= 8
    assert search["configs_measured"] == len(docs) >= 3
    gated = [d for d in docs if not d["gates"].get("skipped")]
    assert gated and all(d["lossless_reconfigure"]["deterministic_inference"] is True for d in gated)
    assert all(d["engine"]["deterministic_inference"] is False for d in docs)  # the figures: as deployed
    assert search["stop_reason"].startswith("restart budget reached")
    assert [p["label"] for p in search["path"]][:2] == ["baseline", "ddtree-b8-t4-w2048-bs8"]
    (winner,) = search["winners"]
    assert winner["label"] and winner["estimate"]["low"] < winner["estimate"]["mean"] < winner["estimate"]["high"]
    report = (run / "tune" / "report.md").read_text()
    assert report.startswith("# SIMULATED tuning report: t") and winner["label"] in report
    mode = json.loads((run / "plan.json").read_text())["sandbox"]["mode"]
    assert mode in ("bwrap", "namespaces")
    assert f"| coding sandbox | {mode}; modes in the gated results: {mode} |" in report
    assert (run / "tune" / "plots" / "search.png").read_bytes()[:4] == b"\x89PNG"
    assert "SIMULATED sweep report: t" in (run / "summary.md").read_text()
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run, capture_output=True, check=False)
    assert check.returncode == 0, check.stdout
    # shown, not written
    target = inventory / "host_vars" / "sglang-testhost" / "tune.yml"
    out = " ".join(captured.err.split())
    if winner["label"] != "ddtree-b8-t4-w2048-bs8":
        assert "proposed change to the inventory" in out and "+sglang_service_ddtree_budget:" in captured.err
        assert "not written; to write it: python -m repro_py.tune" in out and not target.exists()
        # --resume of the finished run restarts nothing and writes it
        before = sorted(p.name for p in (run / "configs").iterdir())
        assert main([str(inventory), "--resume", "--run-id", "t", "--results", str(results), "--write",
                     "--reconfigurer", "local"]) == ExitCode.OK  # fmt: skip
        assert sorted(p.name for p in (run / "configs").iterdir()) == before
        text = target.read_text()
        assert "# run id: t" in text and "# manifest sha256: " in text
        assert "written" in capsys.readouterr().err
    else:
        assert "already runs" in out


def test_resume_without_a_run_id_takes_the_latest_unfinished_tuning_run(
    tmp_path: Path, inventory: Path, capsys
) -> None:
    from repro_py.tune.cli import latest_tuning_run  # noqa: PLC0415

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
