"""The sweep end to end on the podman systemd test host, through Ansible.

`python -m repro_py.sweep inventory/local` with a grid of 7 configs in ONE run
within one hour: one that fails to start (crash-on-load, rolled back to the
last good unit) and one that garbles (mask-offset) next to five good ones
(baseline, DFlash, DDTree at three settings). With `--lossless-restart
separate` (the default) every config that reaches its gates is restarted twice
through the play: as the inventory deploys it (no deterministic inference) for
the benchmark, the coding gate and the config echo, then with
`sglang_service_deterministic_inference: true` for the lossless gate: 13 config
restarts, the rollback's and the restore's, so the unit is started far more
than StartLimitBurst (3) times within StartLimitIntervalSec (1 h) and every
good config must still be served (systemd >= 255 keeps the start count across
daemon-reload). What each restart ran is read from the engine's own
/server_info echo. Ctrl-C between the two restarts of the second config, then
--resume: only that config's gate restart runs (its figures kept, not measured
again); the report, plots and a manifest that GNU sha256sum -c accepts.

Needs the deployed test host (`make e2e` deploys it first) and runs only with
SGLANG_TESTHOST=1. SWEEP_E2E_INVENTORY points it at another copy of
inventory/local (another container and port); the run directory is kept under
$SWEEP_E2E_RESULTS when set.
"""

from __future__ import annotations

import json
import os
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
INVENTORY = os.environ.get("SWEEP_E2E_INVENTORY") or "inventory/local"
pytestmark = pytest.mark.testhost

GRID = {
    "configs": [
        {"algorithm": "none"},
        {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
        {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8, "sim_fault": "crash-on-load"},
        {"algorithm": "ddtree", "budget": 12, "topk": 6, "window": 2048, "block_size": 8},
        {"algorithm": "dflash", "window": 2048, "block_size": 8},
        {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048, "block_size": 8, "sim_fault": "mask-offset"},
        {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": None, "block_size": 8},
    ]
}
GOOD = ("baseline", "ddtree-b8-t4-w2048-bs8", "ddtree-b12-t6-w2048-bs8", "dflash-w2048-bs8", "ddtree-b16-t4-wnone-bs8")
SECOND = "ddtree-b8-t4-w2048-bs8"
#: every config that reaches its gates restarts twice; crash-on-load once (it never serves: no gate restart)
RESTARTS = 2 * (len(GOOD) + 1) + 1
ONE_HOUR = 3600.0
BENCH = ["--bench-contexts", "60", "1024", "--bench-concurrency", "1", "4", "--repeats", "2", "--max-tokens", "64"]


def _sweep(args: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")}
    return subprocess.Popen(
        [sys.executable, "-m", "repro_py.sweep", INVENTORY, *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.skipif(os.environ.get("SGLANG_TESTHOST") != "1", reason="set SGLANG_TESTHOST=1 (make e2e)")
def test_sweep_on_the_systemd_test_host_interrupted_and_resumed(tmp_path: Path) -> None:
    results = Path(os.environ.get("SWEEP_E2E_RESULTS") or tmp_path / "results")
    run_id = f"e2e-{time.strftime('%Y%m%dT%H%M%S')}"
    run_dir = results / run_id
    grid = tmp_path / "grid.yml"
    grid.write_text(yaml.safe_dump(GRID), encoding="utf-8")
    common = ["--grid", str(grid), "--results", str(results), "--run-id", run_id, "-e", "sglang_service_sim_speed=10"]

    started = time.monotonic()
    proc = _sweep([*common, *BENCH])
    partial = run_dir / "partial" / f"{SECOND}.json"
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline and not partial.is_file():  # its production stage done, its gate's next
        if proc.poll() is not None:
            pytest.fail(f"the sweep ended before {SECOND}'s gate restart:\n{proc.communicate()[0]}")
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.INTERRUPTED, out
    assert json.loads((run_dir / "state.json").read_text())["status"] == "interrupted"
    first = {p.name: p.read_bytes() for p in (run_dir / "configs").glob("*.json")}
    assert set(first) == {"baseline.json"}, out
    kept = json.loads(partial.read_text())["result"]
    assert kept["bench"]["cells"] and kept["gates"]["coding"] and "lossless" not in kept["gates"]
    assert not list(run_dir.rglob("*.tmp"))

    proc = _sweep(["--results", str(results), "--resume", "--run-id", run_id])
    out, _ = proc.communicate(timeout=ONE_HOUR)
    wall = time.monotonic() - started
    print(out)
    print(f"e2e sweep: {len(GRID['configs'])} configs, {RESTARTS} config restarts and the restore in {wall:.0f} s "
          "(interrupt and resume included)")  # fmt: skip
    assert proc.returncode == ExitCode.OK, out
    assert wall < ONE_HOUR, f"the sweep took {wall:.0f} s: its starts no longer fall within one start-limit interval"
    for name, data in first.items():
        assert (run_dir / "configs" / name).read_bytes() == data, f"{name} was rerun after --resume"
        assert f"{name[:-5]}: done" in out
    assert f"{SECOND}: its production stage ran in an earlier session (kept); only its lossless restart runs" in out

    docs = {p.stem: json.loads(p.read_text()) for p in (run_dir / "configs").glob("*.json")}
    assert len(docs) == len(GRID["configs"])
    assert docs[SECOND]["bench"] == kept["bench"] and docs[SECOND]["reconfigure"] == kept["reconfigure"]
    for label in (*GOOD, "ddtree-b16-t4-w2048-bs8-fault-mask-offset"):  # served, after the 3rd start too
        doc = docs[label]
        assert label not in GOOD or doc["status"] == "ok", doc["failure"]
        assert doc["engine"]["kind"] == "simulated" and doc["engine"]["sim_speed"] == 10.0
        assert doc["reconfigure"]["time_to_ready_s"] > 0
        # the figures: the unit the inventory deploys (the engine's own echo); the lossless gate: its own restart
        assert doc["engine"]["deterministic_inference"] is False
        assert doc["reconfigure"]["server_info_echo"]["enable_deterministic_inference"] is False
        gate = doc["lossless_reconfigure"]
        assert gate["status"] == "ready" and gate["server_info_echo"]["enable_deterministic_inference"] is True
        assert gate["invocation_id"] != doc["reconfigure"]["invocation_id"] and gate["time_to_ready_s"] > 0
        assert gate["unit_sha256"] != doc["reconfigure"]["unit_sha256"]
        lossless = doc["gates"]["lossless"]
        assert lossless["restart"] == "own" and lossless["deterministic"]["server"] is True
        assert lossless["server_log"]["source"] == f"journal of invocation {gate['invocation_id']}"
    assert sum(restarts_of(d) for d in docs.values()) == RESTARTS
    crash = docs["ddtree-b8-t4-w2048-bs8-fault-crash-on-load"]
    assert crash["failure"]["class"] == "failed_to_start", crash["failure"]
    assert any("crash-on-load" in line for line in crash["failure"]["journal"]), crash["failure"]
    assert crash["reconfigure"]["status"] == "rolled_back", crash["reconfigure"]
    assert "lossless_reconfigure" not in crash  # it never served: no gate restart
    garbled = docs["ddtree-b16-t4-w2048-bs8-fault-mask-offset"]
    assert garbled["failure"]["class"] == "gate_failed", garbled["failure"]
    assert "lossless" in garbled["failure"]["reason"]
    assert garbled["gates"]["lossless"]["verdict"] in ("diverged", "server_log"), garbled["gates"]["lossless"]

    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("# SIMULATED")
    assert "ddtree-b8-t4-w2048-bs8-fault-crash-on-load | T=0 (greedy), top_p=1 | failed_to_start |" in summary
    for png in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert (run_dir / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run_dir, check=False,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "complete"
    assert state["restore"]["status"] == "ok", state["restore"]
    assert state["restore"]["label"] == "ddtree-b8-t4-w2048-bs8"  # the inventory's sweep_default_config
    # the restore: as the inventory deploys it, never with the lossless gate's deterministic inference
    assert state["restore"]["server_info_echo"]["enable_deterministic_inference"] is False
