"""The tuner on three deployed test hosts, through production's path: ``python -m repro_py.tune
tests/fleet/inventory`` (the host-class play, a lease per host, ``playbooks/reconfigure.yml`` per host through
ansible-runner, side by side), asynchronous proposals over the three.

What must hold: every host restarts the current config first and then measures candidates; the run stays in its
restart budget counted over every host (the three restores included); every host is restored and its lease given
back; the tuning report names the hosts; nothing is written to the inventory (``--no-write``).
Needs SGLANG_TESTHOST=1 and the fleet deployed (``make fleet-deploy``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fleet.hosts import ENV, HOSTS, INVENTORY, ROOT, TESTHOST

pytestmark = TESTHOST
CURRENT = "ddtree-b8-t4-w2048-bs8"
SPACE = {"configs": [{"algorithm": "none"}],
         "grid": {"algorithm": ["ddtree"], "budget": [4, 8, 12], "topk": [1, 4], "window": [2048]}}  # fmt: skip


def run_showing_stacks_if_hung(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (a Python program); past ``timeout_s`` it gets SIGABRT before it is killed, and Python's fault
    handler prints every thread's stack into the failure: a hung run says where it hung."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**ENV, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd[1:4])} still ran after {timeout_s:g} s; its last output and every thread's "
                    f"stack at SIGABRT:\n{out[-3000:]}\n{err[-12000:]}")  # fmt: skip
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def test_the_tuner_measures_on_three_hosts_side_by_side_and_restores_each(tmp_path: Path) -> None:
    space = tmp_path / "space.yml"
    space.write_text(yaml.safe_dump(SPACE), encoding="utf-8")
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "repro_py.tune", str(INVENTORY), "--objective", "single-stream", "--space", str(space),
           "--results", str(results), "--run-id", "fleet-tune", "-e", "sglang_service_sim_speed=20",
           "--max-restarts", "12", "--lossless-restart", "shared", "--max-tokens", "48", "--screen-tokens", "16",
           "--repeats", "2", "--no-write",
           # the stand-in hosts share this machine's two cores: their offsets are load, not hardware
           "--host-offset-limit", "0.5"]  # fmt: skip
    done = run_showing_stacks_if_hung(cmd, 1500)
    text = done.stdout + done.stderr
    print(text[-6000:])
    assert done.returncode == 0, text[-4000:]
    run = results / "fleet-tune"
    fleet = json.loads((run / "tune" / "fleet.json").read_text())
    assert set(fleet["hosts"]) == set(HOSTS)
    for name, host in fleet["hosts"].items():
        assert host["status"] == "active", (name, host)
        assert host["restore"]["status"] == "ok", (name, host["restore"])
        assert host["configs"], name  # every host measured something
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    firsts = {}
    for doc in sorted(docs, key=lambda d: d["started_at"]):
        firsts.setdefault(doc["host"]["name"], doc["label"])
    # every host's first config is the current config (the baseline's host after the baseline)
    assert sum(1 for label in firsts.values() if label.startswith(CURRENT)) >= 2, firsts
    assert all(doc["host_class"]["key"] == fleet["class"] for doc in docs)
    search = json.loads((run / "tune" / "search.json").read_text())
    assert search["restarts"] <= 12
    assert "released" in text and text.count("released lease") == 3, text[-3000:]
    report = (run / "tune" / "report.md").read_text()
    assert "## The hosts (one class:" in report and all(f"| {h} | active |" in report for h in HOSTS)
    assert not (INVENTORY / "host_vars").exists()  # --no-write
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run, capture_output=True,
                           check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout
