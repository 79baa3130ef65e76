"""The tuner on two deployed test hosts, through production's path: ``python -m repro_py.tune
tests/fleet/inventory`` (the host-class play, a lease per host, ``playbooks/reconfigure.yml`` per host through
ansible-runner, side by side), asynchronous proposals over the two; Ctrl-C after the first result, then
``--resume`` as printed.

What must hold: Ctrl-C stops every host, restores each and gives its lease back, and prints a resume line that keeps
the run's extra var; the resume, as printed (plus ``--no-write``), measures nothing twice; every host restarts the
current config first and then measures candidates; the run stays in its restart budget counted over every host
(the restores included); every restart is a ``reconfigure.yml`` play whose events ansible-runner kept; every
config's figures come from the simulated engine at its sim speed; the winner passed its gates at the full rung; the
tuning report (SIMULATED) names the hosts, its plots are PNGs and ``sha256sum -c`` accepts the manifest; every host
is restored and its lease given back; the write-back is shown only when the winner beats the current config with the
run's confidence, and nothing is written to the inventory (``--no-write``).
This is the tuner's one end-to-end run on test hosts in ``make test`` (the rehearsal's tuner run reads the
operator's vaulted inventory); the tuner's counting of ``--lossless-restart separate`` restarts is
``tests/tune/test_lossless_restart.py``'s, on local engines.
Needs SGLANG_TESTHOST=1 and the fleet deployed (``make fleet-deploy``).
"""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from tests.fleet.hosts import ENV, HOSTS, INVENTORY, ROOT, TESTHOST

pytestmark = TESTHOST
CURRENT = "ddtree-b8-t4-w2048-bs8"
SPACE = {"configs": [{"algorithm": "none"}],
         "grid": {"algorithm": ["ddtree"], "budget": [4, 8, 12], "topk": [1, 4], "window": [2048]}}  # fmt: skip
BUDGET = 10
RELATIVE = INVENTORY.relative_to(ROOT)


def finish_showing_stacks_if_hung(proc: subprocess.Popen[str], timeout_s: float, what: str) -> tuple[str, str]:
    """Wait for ``proc`` (a Python program); past ``timeout_s`` it gets SIGABRT before it is killed, and Python's
    fault handler prints every thread's stack into the failure: a hung run says where it hung."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"{what} still ran after {timeout_s:g} s; its last output and every thread's stack at SIGABRT:"
                    f"\n{out[-3000:]}\n{err[-12000:]}")  # fmt: skip


def tune(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "repro_py.tune", *args], cwd=ROOT,
                            env={**ENV, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_the_tuner_measures_on_two_hosts_interrupted_resumed_as_printed_and_restores_each(tmp_path: Path) -> None:
    space = tmp_path / "space.yml"
    space.write_text(yaml.safe_dump(SPACE), encoding="utf-8")
    results = tmp_path / "results"
    run = results / "fleet-tune"
    proc = tune([str(RELATIVE), "--objective", "single-stream", "--space", str(space), "--results", str(results),
                 "--run-id", "fleet-tune", "--max-restarts", str(BUDGET), "--lossless-restart", "shared",
                 "--max-tokens", "48", "--screen-tokens", "16", "--repeats", "2",
                 # the stand-in hosts share this machine's two cores: their offsets are load, not hardware
                 "--host-offset-limit", "0.5", "-e", "sglang_service_sim_speed=20"])  # fmt: skip
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not list((run / "configs").glob("*.json")):
        if proc.poll() is not None:
            pytest.fail(f"the tuner ended before its first result:\n{''.join(proc.communicate())[-6000:]}")
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = finish_showing_stacks_if_hung(proc, 600, "the tuner after Ctrl-C")
    text = out + err
    print(text[-6000:])
    assert proc.returncode == ExitCode.INTERRUPTED, text[-4000:]
    assert json.loads((run / "state.json").read_text())["status"] == "interrupted"
    assert text.count("released lease") == len(HOSTS), text[-3000:]  # every host given back at Ctrl-C
    resume = next(line for line in text.splitlines() if line.startswith("python -m repro_py.tune "))
    assert resume.startswith(f"python -m repro_py.tune {RELATIVE} --resume --run-id fleet-tune"), resume
    assert resume.endswith(" -e sglang_service_sim_speed=20"), resume  # the run's extra var, kept
    first = {p.name: p.read_bytes() for p in (run / "configs").glob("*.json")}
    # every file the bundle writes is atomic: no temporary of its own is left. ansible-runner writes its event files
    # as <uuid>-partial.json.tmp and renames them; a Ctrl-C during a play can leave one in the runner's private
    # artifacts (job_events/, not a result; only finished *.json events are ever read back)
    ours = [p for p in run.rglob("*.tmp") if "job_events" not in p.parts]
    assert first and not ours, (sorted(first), ours)

    proc = tune([*shlex.split(resume)[3:], "--no-write"])  # as printed
    out, err = finish_showing_stacks_if_hung(proc, 1500, "the resumed tuner")
    text = out + err
    print(text[-6000:])
    assert proc.returncode == ExitCode.OK, text[-4000:]
    for name, content in first.items():  # measured before Ctrl-C: kept, not measured again
        assert (run / "configs" / name).read_bytes() == content, name
    assert "fingerprint matches; not rerun" in text, text[-3000:]

    fleet = json.loads((run / "tune" / "fleet.json").read_text())
    assert set(fleet["hosts"]) == set(HOSTS)
    for name, host in fleet["hosts"].items():
        assert host["status"] == "active", (name, host)
        assert host["restore"]["status"] == "ok", (name, host["restore"])
        assert host["configs"], name  # every host measured something
    docs = {p.stem: json.loads(p.read_text()) for p in (run / "configs").glob("*.json")}
    firsts: dict[str, str] = {}
    for doc in sorted(docs.values(), key=lambda d: d["started_at"]):
        firsts.setdefault(doc["host"]["name"], doc["label"])
    # every host's first config is the current config, but the baseline's host's (the baseline, then the current)
    assert sorted(firsts) == sorted(HOSTS), firsts
    assert sum(1 for label in firsts.values() if label.startswith(CURRENT)) >= len(HOSTS) - 1, firsts
    for label, doc in docs.items():
        assert doc["schema"] == 1 and doc["status"] == "ok", (label, doc["failure"])
        assert doc["host_class"]["key"] == fleet["class"], label
        assert doc["engine"]["kind"] == "simulated" and doc["engine"]["sim_speed"] == 20.0, label
        assert doc["reconfigure"]["time_to_ready_s"] > 0, label
        host = doc["host"]["name"]  # restarted by ansible-runner on playbooks/reconfigure.yml, events kept
        assert list((run / "runner" / host / label).glob("artifacts/*/job_events/*.json")), (host, label)
    search = json.loads((run / "tune" / "search.json").read_text())
    assert search["restarts"] <= BUDGET, search["stop_reason"]
    assert search["configs_measured"] == len(docs) >= 4, search["stop_reason"]
    (winner,) = search["winners"]
    assert winner["label"] and winner["label"] != "baseline", winner
    entry = next(p for p in search["path"] if p["label"] == winner["label"])
    assert entry["gates"] == "pass" and entry["last_rung"] == "full"
    assert "released" in text and text.count("released lease") == len(HOSTS), text[-3000:]
    report = (run / "tune" / "report.md").read_text()
    assert report.startswith("# SIMULATED tuning report") and winner["label"] in report
    assert "## The hosts (one class:" in report and all(f"| {h} | active |" in report for h in HOSTS)
    for png in ("search", "surrogate"):
        assert (run / "tune" / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    state = json.loads((run / "state.json").read_text())
    assert state["status"] == "complete", state
    # the write-back is shown only when the winner beats the current config, and never written without --write
    flat = " ".join(text.split())
    (versus,) = search["versus"]
    if versus["replace"]:
        assert "proposed change to the inventory" in text and "+sglang_service_ddtree_budget:" in text, flat[-3000:]
        assert "not written; to write it" in flat and "-e sglang_service_sim_speed=20 --write" in flat, flat[-3000:]
    else:  # not ahead of the current config with the run's confidence, or the current config itself
        assert "proposed change" not in text, flat[-3000:]
        assert f"nothing to write back for single-stream: {versus['text']}" in flat or (
            winner["label"] == CURRENT and "already runs the single-stream winner" in flat
        ), flat[-3000:]
    assert not (INVENTORY / "host_vars").exists()  # --no-write
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=run, capture_output=True,
                           check=False)  # fmt: skip
    assert check.returncode == 0, check.stdout
