"""The tuner end to end on the podman systemd test host, through Ansible.

`python -m repro_py.tune inventory/local --objective single-stream` over a
small space with compressed time (`-e sglang_service_sim_speed=20`, short
outputs, an 8-restart budget: the baseline, the current config, one candidate,
the current config again for the between-restart noise, the restore): every
restart is `playbooks/reconfigure.yml` through ansible-runner, as in a sweep;
a gated config is restarted twice (as deployed for its figures, then with
deterministic inference for its lossless gate: `--lossless-restart
separate`), and every restart counts against the budget. Ctrl-C after the
first result, then `--resume` as printed (the extra var kept); the winner, the
search path, both reports, a manifest that GNU `sha256sum -c` accepts, the
default config restored, and the write-back shown as a diff but not written
(`--no-write`) when the winner beats the current config with the run's
confidence, else the reason nothing is proposed.

Needs the deployed test host (`make e2e` deploys it first) and runs only with
SGLANG_TESTHOST=1. TUNE_E2E_INVENTORY points it at another copy of
inventory/local (another container and port); the run directory is kept under
$SWEEP_E2E_RESULTS when set.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sweep.lossless_restart import restarts_of

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = Path(os.environ.get("TUNE_E2E_INVENTORY") or "inventory/local")
pytestmark = pytest.mark.testhost

SPACE = {
    "configs": [{"algorithm": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [5, 8], "topk": [1, 4], "window": [2048], "block_size": [8]},
}
SMALL = ["--screen-tokens", "16", "--max-tokens", "64", "--repeats", "2", "-e", "sglang_service_sim_speed=20"]


def _tune(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")}
    return subprocess.Popen(
        [sys.executable, "-m", "repro_py.tune", str(INVENTORY), *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.skipif(os.environ.get("SGLANG_TESTHOST") != "1", reason="set SGLANG_TESTHOST=1 (make e2e)")
def test_tune_single_stream_on_the_systemd_test_host_interrupted_and_resumed(tmp_path: Path) -> None:
    results = Path(os.environ.get("SWEEP_E2E_RESULTS") or tmp_path / "results")
    run_id = f"e2e-tune-{time.strftime('%Y%m%dT%H%M%S')}"
    run_dir = results / run_id
    space = tmp_path / "space.yml"
    space.write_text(yaml.safe_dump(SPACE), encoding="utf-8")
    inventory_dir = INVENTORY if INVENTORY.is_absolute() else ROOT / INVENTORY
    written = inventory_dir / "host_vars"
    had_host_vars = written.exists()
    common = ["--results", str(results), "--run-id", run_id]

    proc = _tune(["--objective", "single-stream", "--space", str(space), "--max-restarts", "8", *SMALL, *common])
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not list((run_dir / "configs").glob("*.json")):
        if proc.poll() is not None:
            pytest.fail(f"the tuner ended before its first result:\n{proc.communicate()[0]}")
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.INTERRUPTED, out
    assert json.loads((run_dir / "state.json").read_text())["status"] == "interrupted"
    resume = next(line for line in out.splitlines() if line.startswith("python -m repro_py.tune "))
    assert resume.startswith(f"python -m repro_py.tune {INVENTORY} --resume --run-id {run_id}"), out
    assert resume.endswith(" -e sglang_service_sim_speed=20"), resume  # the run's extra var, kept
    first = {p.name: p.read_bytes() for p in (run_dir / "configs").glob("*.json")}
    assert len(first) == 1 and "baseline.json" in first, out  # the lossless reference runs first
    assert not list(run_dir.rglob("*.tmp"))

    proc = _tune([*shlex.split(resume)[4:], "--no-write"])  # as printed
    out, _ = proc.communicate(timeout=2400)
    print(out)
    assert proc.returncode == ExitCode.OK, out
    assert (run_dir / "configs" / "baseline.json").read_bytes() == first["baseline.json"]
    assert "baseline: done (ok), fingerprint matches; not rerun" in out

    search = json.loads((run_dir / "tune" / "search.json").read_text())
    docs = {p.stem: json.loads(p.read_text()) for p in (run_dir / "configs").glob("*.json")}
    # every restart counted: each config's production one, each gated config's lossless gate's own, the restore
    assert search["restarts"] == 1 + sum(restarts_of(d) for d in docs.values()) <= 8, search["stop_reason"]
    assert search["configs_measured"] == len(docs) >= 3, search["stop_reason"]
    path = [p["label"] for p in search["path"]]
    assert path[:2] == ["baseline", "ddtree-b8-t4-w2048-bs8"]  # the reference, then the inventory's config
    assert path[3] == "ddtree-b8-t4-w2048-bs8.r2" and search["noise"]["between_restarts"]["restarts"] == 2
    (winner,) = search["winners"]
    assert winner["label"] and winner["label"] != "baseline", winner
    entry = next(p for p in search["path"] if p["label"] == winner["label"])
    assert entry["gates"] == "pass" and entry["last_rung"] == "full"
    for label, doc in docs.items():
        assert doc["schema"] == 1 and doc["status"] == "ok", (label, doc["failure"])
        assert doc["engine"]["kind"] == "simulated" and doc["engine"]["sim_speed"] == 20.0
        assert doc["reconfigure"]["time_to_ready_s"] > 0
        # restarted by ansible-runner on playbooks/reconfigure.yml, events kept
        assert list((run_dir / "runner" / label / "artifacts").glob("*/job_events/*.json")), label
        # the figures from the unit as deployed; a gated config's lossless gate from its own deterministic restart
        assert doc["reconfigure"]["server_info_echo"]["enable_deterministic_inference"] is False, label
        gated = doc["gates"].get("skipped") is not True
        assert ("lossless_reconfigure" in doc) == gated, label
        if gated:
            echo = doc["lossless_reconfigure"]["server_info_echo"]
            assert echo["enable_deterministic_inference"] is True and doc["gates"]["lossless"]["restart"] == "own"

    report = (run_dir / "tune" / "report.md").read_text()
    assert report.startswith("# SIMULATED tuning report") and winner["label"] in report
    assert (run_dir / "summary.md").read_text().startswith("# SIMULATED")
    for png in ("search", "surrogate"):
        assert (run_dir / "tune" / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run_dir, check=False,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "complete" and state["restore"]["status"] == "ok", state.get("restore")
    assert state["restore"]["label"] == "ddtree-b8-t4-w2048-bs8"
    # the write-back is shown only when the winner beats the current config, and never written without --write
    (versus,) = search["versus"]
    if versus["replace"]:
        assert "proposed change to the inventory" in out and "+sglang_service_ddtree_budget:" in out
        assert "not written; to write it" in out and "-e sglang_service_sim_speed=20 --write" in out
    else:  # not ahead of the current config with the run's confidence, or the current config itself
        assert "proposed change" not in out, out
        assert f"nothing to write back for single-stream: {versus['text']}" in " ".join(out.split()) or (
            winner["label"] == "ddtree-b8-t4-w2048-bs8" and "already runs the single-stream winner" in out
        ), out
    assert written.exists() == had_host_vars
