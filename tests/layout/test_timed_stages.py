"""scripts/timed-stages.sh, the runner of `make test`'s lanes: side lanes start after the stage they name, a
failed side lane fails the run, bad lane arguments are refused naming the value, an empty lane is none."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "timed-stages.sh"
MAKEFILE = "".join(f"{t}:\n\t@echo ran-{t} >> order.txt\n" for t in "abcd") + "bad:\n\t@false\n"


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    proc = subprocess.run([str(SCRIPT), "T", str(tmp_path / "r" / "t.txt"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    times = tmp_path / "r" / "t.txt"
    return proc, times.read_text() if times.exists() else ""


def test_two_side_lanes_start_after_their_stages_and_every_stage_is_timed(tmp_path: Path) -> None:
    proc, times = run(tmp_path, "a b", "c", "a", "d", "b")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "side lane 1 (c) started" in proc.stdout and "side lane 2 (d) started" in proc.stdout
    for line in ("T: stage a took", "T: stage b took", "T: side lane 1: stage c took", "T: side lane 2: stage d took"):
        assert line in times, times
    assert "% busy, its own processes" in times and "T: all stages took" in times
    assert sorted((tmp_path / "order.txt").read_text().split()) == ["ran-a", "ran-b", "ran-c", "ran-d"]
    assert (tmp_path / "r" / "side-lane-2.log").exists()


def test_a_failed_side_lane_fails_the_run_and_its_log_is_shown(tmp_path: Path) -> None:
    proc, times = run(tmp_path, "a b", "bad", "a")
    assert proc.returncode == 1
    assert "side lane 1 failed" in proc.stdout and "T: side lane 1: stage bad FAILED" in times


def test_bad_lane_arguments_are_refused_naming_the_value_before_any_stage(tmp_path: Path) -> None:
    proc, _ = run(tmp_path, "a b", "c", "z")
    assert proc.returncode == 2 and "starts after 'z', which is not a main-lane stage (a b)" in proc.stderr
    proc, _ = run(tmp_path, "a b", "c")
    assert proc.returncode == 2 and "odd count" in proc.stderr
    assert not (tmp_path / "order.txt").exists()


def test_an_empty_side_lane_is_no_lane(tmp_path: Path) -> None:
    proc, _ = run(tmp_path, "a b", "", "a")
    assert proc.returncode == 0 and "side lane" not in proc.stdout


def test_each_stage_reports_the_cpu_time_of_its_own_processes_and_the_run_the_machines(tmp_path: Path) -> None:
    """A stage that computes shows its processes' CPU time, one that sleeps shows none; the closing line adds the
    machine's CPU time over the run (where the test-host containers' share is counted too)."""
    (tmp_path / "burn.py").write_text("import time\nwhile time.process_time() < 1.6:\n    pass\n")
    (tmp_path / "Makefile").write_text(MAKEFILE + "burn:\n\t@python3 burn.py\nnap:\n\t@sleep 1\n")
    proc = subprocess.run([str(SCRIPT), "T", str(tmp_path / "t.txt"), "burn nap"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    times = (tmp_path / "t.txt").read_text()
    burn = re.search(r"stage burn took \d+ s \(CPUs \d+% busy, its own processes (\d+) CPU s[;)]", times)
    nap = re.search(r"stage nap took \d+ s \(CPUs \d+% busy, its own processes (\d+) CPU s[;)]", times)
    assert burn and nap, times
    assert int(burn.group(1)) >= 1 and int(nap.group(1)) == 0, times
    assert re.search(r"T: the machine's \d+ CPUs were busy \d+ CPU s in all \(\d+%\)", times), times


def test_each_test_host_is_counted_for_what_it_used_during_the_run(tmp_path: Path) -> None:
    """A container's line is the CPU time it used during the run, from its cgroup: the cgroup a container removed
    before the run left behind (its old count frozen) is not listed, one running already counts from the run's
    start (and keeps that count when it is stopped and started again, its cgroup counting from 0), and two
    containers of one name (a host made again) are one line, their times added."""
    cg = tmp_path / "cgroup"
    gone, running, first, again = (cg / f"libpod-{c * 64}" for c in "abcd")
    for d, usage in ((cg, 0), (gone, 300 * 10**9), (running, 40 * 10**9)):
        d.mkdir(parents=True)
        (d / "cpuacct.usage").write_text(f"{usage}\n")
    # the stage: "running" uses 3 CPU s, is stopped and started (its count from 0) and uses 5; a host appears and
    # uses 2, is made again (a new ID) and uses 4
    stage = f"""import pathlib, shutil, time
def put(d, n):
    d.mkdir(exist_ok=True)
    (d / "cpuacct.usage").write_text(f"{{n * 10**9}}\\n")  # a line, as the kernel writes it
put(pathlib.Path("{running}"), 43)
put(pathlib.Path("{first}"), 2)
time.sleep(1.5)
put(pathlib.Path("{again}"), 4)
put(pathlib.Path("{running}"), 5)
time.sleep(1.5)
"""
    (tmp_path / "stage.py").write_text(stage)
    (tmp_path / "Makefile").write_text(MAKEFILE + "hosts:\n\t@python3 stage.py\n")
    # no podman here: a container is named by its ID's first 12 characters; make "first" and "again" one name
    fake = tmp_path / "bin"
    fake.mkdir()
    named = f"*{'c' * 64}*|*{'d' * 64}*"
    (fake / "podman").write_text(f'#!/bin/sh\ncase "$*" in {named}) echo host-x;; *) exit 1;; esac\n')
    (fake / "podman").chmod(0o755)
    env = {**os.environ, "TIMED_STAGES_CGROUP": str(cg), "TIMED_STAGES_SAMPLE_S": "0.5",
           "PATH": f"{fake}:{os.environ['PATH']}"}  # fmt: skip
    proc = subprocess.run([str(SCRIPT), "T", str(tmp_path / "t.txt"), "hosts"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    times = (tmp_path / "t.txt").read_text()
    hosts = re.findall(r"T: test host (\S+) used (\d+) CPU s", times)
    assert hosts == [("b" * 12, "8"), ("host-x", "6")], times


def test_each_stage_says_when_it_ended_so_the_lanes_ends_can_be_compared(tmp_path: Path) -> None:
    """Every stage line gives the seconds into the run at which it ended; a side lane started after a main-lane
    stage ends after it (a stage that sleeps 2 s here), and no stage ends after the run."""
    (tmp_path / "Makefile").write_text(MAKEFILE + "nap:\n\t@sleep 2\n")
    proc = subprocess.run([str(SCRIPT), "T", str(tmp_path / "t.txt"), "nap a", "b", "nap"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    times = (tmp_path / "t.txt").read_text()
    ended = {m[0]: int(m[1]) for m in re.findall(r"stage (\w+) took \d+ s \(.*; it ended (\d+) s into the run", times)}
    assert set(ended) == {"nap", "a", "b"}, times
    assert ended["nap"] >= 2 and ended["b"] >= ended["nap"], ended
    total = int(re.search(r"T: all stages took (\d+) s", times).group(1))  # type: ignore[union-attr]
    assert max(ended.values()) <= total, (ended, total)
