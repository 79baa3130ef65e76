"""The host lease: one sweep or deploy at a time on a host, refused at once, no timer.

The rules (module_utils/sglang_lease.py) unit by unit, then the role's tasks
(tasks/lease.yml through playbooks/lease.yml, local connection, no systemd):
a holder whose controller process is gone is taken over, a live one is not,
however old its lease.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, load_module

rules = load_module("sglang_lease", ROOT / "plugins/module_utils/sglang_lease.py")
ME = rules.process_identity(os.getpid())


def dead_process() -> tuple[int, int]:
    """The PID and start time of a process that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = rules.pid_start_time(proc.pid)
    proc.kill()
    proc.wait()
    assert isinstance(start, int)
    return proc.pid, start


def test_a_second_run_is_refused_at_once_naming_holder_since_and_takeover(tmp_path: Path) -> None:
    path = tmp_path / "run" / "host.lease"
    first = rules.acquire(path, "sweep-a", "sweep a", ME, host_boot="boot-1")
    assert first["acquired"] and first["changed"] and "took_over" not in first
    started = time.monotonic()
    second = rules.acquire(path, "deploy-b", "deploy", ME, host_boot="boot-1")
    assert time.monotonic() - started < 1.0  # no waiting
    assert second["acquired"] is False
    msg = second["msg"]
    assert "leased to sweep a (lease sweep-a)" in msg
    assert f"since {first['lease']['since']}" in msg and f"controller PID {os.getpid()}" in msg
    assert "-e sglang_service_lease_takeover=true" in msg and "--take-over-lease" in msg
    assert json.loads(path.read_text())["lease_id"] == "sweep-a"
    again = rules.acquire(path, "sweep-a", "sweep a", ME, host_boot="boot-1")
    assert again["acquired"] and again["changed"] is False  # idempotent for the same lease id


def test_an_old_lease_of_a_live_holder_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "host.lease"
    rules.write(path, {**rules.new_lease("old", "sweep x", ME, "boot-1"), "since": "2000-01-01T00:00:00+00:00"})
    assert rules.alive(ME["pid"], ME["pid_start_time"])
    out = rules.acquire(path, "new", "deploy", ME, host_boot="boot-1")
    assert out["acquired"] is False and "since 2000-01-01T00:00:00+00:00" in out["msg"]


def test_a_gone_holder_is_taken_over_only_by_compare_and_swap(tmp_path: Path) -> None:
    path = tmp_path / "host.lease"
    pid, start = dead_process()
    rules.write(path, rules.new_lease("gone", "sweep x", {**ME, "pid": pid, "pid_start_time": start}, "boot-1"))
    assert rules.alive(pid, start) is False
    assert rules.alive(os.getpid(), ME["pid_start_time"] + 1) is False  # a reused PID is another process
    assert rules.acquire(path, "new", "deploy", ME, takeover_if="someone-else", host_boot="boot-1")["acquired"] is False
    out = rules.acquire(path, "new", "deploy", ME, takeover_if="gone", host_boot="boot-1")
    assert out["acquired"] and out["took_over"]["lease_id"] == "gone"
    assert "took over the host lease from sweep x (lease gone)" in out["msg"] and "PID dead" in out["msg"]
    assert json.loads(path.read_text())["lease_id"] == "new"


def test_a_reboot_frees_the_lease_and_an_operator_may_take_it(tmp_path: Path) -> None:
    path = tmp_path / "host.lease"
    rules.write(path, rules.new_lease("before", "deploy", ME, "boot-old"))
    out = rules.acquire(path, "after", "deploy", ME, host_boot="boot-new")
    assert out["acquired"] and "host rebooted" in out["msg"]
    forced = rules.acquire(path, "operator", "deploy", ME, takeover=True, host_boot="boot-new")
    assert forced["acquired"] and forced["took_over"]["lease_id"] == "after" and "on request" in forced["msg"]


def test_release_only_by_the_holder_and_check_mode_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d" / "host.lease"
    assert rules.acquire(path, "a", "deploy", ME, host_boot="b", check=True)["acquired"]
    assert not path.parent.exists()  # check mode: no lease, no lock file, no directory
    rules.acquire(path, "a", "deploy", ME, host_boot="b")
    other = rules.release(path, "b")
    assert other["released"] is False and "held by deploy (lease a)" in other["msg"] and path.exists()
    assert rules.release(path, "a", check=True)["released"] and path.exists()
    assert rules.release(path, "a")["released"] and not path.exists()
    assert rules.release(path, "a")["released"] is False  # nothing to give back: reported, not an error


def test_an_unreadable_lease_is_refused_until_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "host.lease"
    path.write_text("{half")
    out = rules.acquire(path, "a", "deploy", ME, host_boot="b")
    assert out["acquired"] is False and "unreadable lease" in out["msg"]
    assert rules.acquire(path, "a", "deploy", ME, takeover=True, host_boot="b")["acquired"]


def _race(path: str, lease_id: str, barrier: object, results: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    out = rules.acquire(Path(path), lease_id, "deploy", ME, host_boot="boot-1")
    results.put((lease_id, out["acquired"]))  # type: ignore[attr-defined]


def test_concurrent_acquires_have_exactly_one_winner(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    for round_ in range(5):
        path = tmp_path / f"r{round_}" / "host.lease"
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(str(path), f"id{i}", barrier, results)) for i in range(6)]
        for proc in procs:
            proc.start()
        got = [results.get(timeout=30) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
        winners = [lease_id for lease_id, won in got if won]
        assert len(winners) == 1, got
        assert json.loads(path.read_text())["lease_id"] == winners[0]


def _stat(pid: int, ppid: int, start: int) -> str:
    return f"{pid} (x y) S {ppid} " + " ".join(["0"] * 17) + f" {start} 0 0\n"


def test_the_holder_is_the_top_level_ansible_playbook_process(tmp_path: Path) -> None:
    tree = {100: (1, "bash"), 200: (100, "python3 /usr/bin/ansible-playbook site.yml"),
            300: (200, "python3 /usr/bin/ansible-playbook site.yml"), 400: (300, "/bin/sh -c python3"),
            500: (400, "python3 AnsiballZ_sglang_host_lease.py")}  # fmt: skip
    for pid, (ppid, cmd) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, ppid, pid * 10))
        (tmp_path / str(pid) / "cmdline").write_text(cmd.replace(" ", "\0"))
    assert rules.playbook_process(500, proc=str(tmp_path)) == 200
    assert rules.pid_start_time(200, proc=str(tmp_path)) == 2000
    assert rules.playbook_process(100, proc=str(tmp_path)) is None


# ---- the role's tasks (playbooks/lease.yml), local connection --------------------------------------


def _play(run_playbook, tmp_path: Path, lease: Path, lease_id: str):  # type: ignore[no-untyped-def]
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        f"testhost ansible_connection=local ansible_become=false ansible_python_interpreter={sys.executable}\n"
    )
    extra = {"sglang_service_lease_state": "acquired", "sglang_service_lease_id": lease_id,
             "sglang_service_lease_path": str(lease)}  # fmt: skip
    return run_playbook("-i", str(inventory), "playbooks/lease.yml", "-e", json.dumps(extra))


def test_the_play_takes_over_a_gone_holder_of_this_controller_and_says_so(run_playbook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lease = tmp_path / "host.lease"
    pid, start = dead_process()
    gone = {**ME, "pid": pid, "pid_start_time": start, "controller_host": socket.gethostname()}
    rules.write(lease, rules.new_lease("sweep-killed", "sweep r1", gone, rules.boot_id()))
    proc = _play(run_playbook, tmp_path, lease, "sweep-next")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "took over the host lease from sweep r1 (lease sweep-killed)" in out
    assert json.loads(lease.read_text())["lease_id"] == "sweep-next"


def test_the_play_refuses_a_live_holder_at_once(run_playbook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lease = tmp_path / "host.lease"
    old = {**rules.new_lease("sweep-live", "sweep r2", ME, rules.boot_id()), "since": "2000-01-01T00:00:00+00:00"}
    rules.write(lease, old)
    proc = _play(run_playbook, tmp_path, lease, "deploy-x")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "the host is leased to sweep r2 (lease sweep-live)" in out and "since 2000-01-01T00:00:00+00:00" in out
    assert "sglang_service_lease_takeover=true" in out
    assert json.loads(lease.read_text())["lease_id"] == "sweep-live"
