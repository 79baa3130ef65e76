"""scripts/timed-stages.sh, the runner of `make test`'s lanes: side lanes start after the stage they name, a
failed side lane fails the run, bad lane arguments are refused naming the value, an empty lane is none."""

from __future__ import annotations

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
    burn = re.search(r"stage burn took \d+ s \(CPUs \d+% busy, its own processes (\d+) CPU s\)", times)
    nap = re.search(r"stage nap took \d+ s \(CPUs \d+% busy, its own processes (\d+) CPU s\)", times)
    assert burn and nap, times
    assert int(burn.group(1)) >= 1 and int(nap.group(1)) == 0, times
    assert re.search(r"T: the machine's \d+ CPUs were busy \d+ CPU s in all \(\d+%\)", times), times
