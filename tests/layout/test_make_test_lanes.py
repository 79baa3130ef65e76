"""What `make test`'s lanes run: every stage once, in one lane; every test file once, by one stage; side lane 1
started once the wheelhouse has passed, side lane 2 once the unit tests have (no more test hosts beside the unit
tests than the rehearsal's); the tuner's end-to-end run on test hosts once, on the fleet (interrupted and
resumed there), not again on molecule's instance or the main test host. Read from make itself (``make -pn`` for the
lanes, ``make -n STAGE`` for what a stage runs), not from the Makefile's text."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANES = ("TEST_STAGES", "SIDE_LANE_1", "SIDE_LANE_2")


def make_vars(*names: str) -> dict[str, str]:
    out = subprocess.run(["make", "-pn", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        name, sep, value = line.partition(" := ")
        if sep and name in names:
            found[name] = value
    return found


def dry_run(stage: str) -> str:
    """The commands ``make STAGE`` runs, its prerequisites' own left out (``-o`` for each of them)."""
    return subprocess.run(["make", "-n", "--no-print-directory", "-o", "venv", "-o", "image", "-o", "system-packages",
                           stage], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip


def files_run_by(commands: str) -> set[str]:
    """The test files and directories the pytest calls in ``commands`` name, directories expanded to their files."""
    files: set[str] = set()
    for call in re.findall(r"-m pytest\b.*?(?:\n(?!\s)|$)", commands.replace("\\\n", " "), re.S):
        for word in call.split():
            path = ROOT / word
            if word.startswith("tests/") and path.is_dir():
                files |= {str(p.relative_to(ROOT)) for p in path.rglob("test_*.py")}
            elif word.startswith("tests/") and word.endswith(".py"):
                files.add(word)
    return files


def test_every_stage_runs_once_and_the_side_lanes_start_after_the_wheelhouse_and_the_unit_tests() -> None:
    lanes = make_vars(*LANES)
    assert set(lanes) == set(LANES), lanes
    stages = [s for name in LANES for s in lanes[name].split()]
    assert len(stages) == len(set(stages)), stages
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True).stdout  # fmt: skip
    # scripts/timed-stages.sh NAME TIMES 'MAIN' ['SIDE' AFTER]...
    words = shlex.split(recipe.replace("\\\n", " "))
    args = words[words.index("scripts/timed-stages.sh") + 3 :]
    assert args == [lanes["TEST_STAGES"], lanes["SIDE_LANE_1"], "wheelhouse", lanes["SIDE_LANE_2"], "unit"], recipe
    main = lanes["TEST_STAGES"].split()
    assert main.index("wheelhouse") < main.index("unit") < main.index("deploy-run")
    # beside the unit tests only the rehearsal's hosts: the fleet comes after it, the other hosts after the unit tests
    assert lanes["SIDE_LANE_1"].split()[0] == "rehearsal-run", lanes


def files_by_stage() -> dict[str, set[str]]:
    """Every stage of the three lanes -> the test files its pytest calls name."""
    lanes = make_vars(*LANES)
    return {stage: files_run_by(dry_run(stage)) for lane in lanes.values() for stage in lane.split()}


def test_no_test_file_is_run_by_two_stages() -> None:
    seen: dict[str, str] = {}
    for stage, paths in files_by_stage().items():
        for path in paths:
            assert path not in seen, f"{path} is run by {seen[path]} and {stage}"
            seen[path] = stage
    assert "tests/fleet/test_fleet_tune_testhost.py" in seen and "tests/e2e/test_sweep_testhost.py" in seen, seen


def test_the_tuner_runs_end_to_end_on_test_hosts_only_on_the_fleet_and_in_the_rehearsal() -> None:
    tuners = set()
    for path in set().union(*files_by_stage().values()):
        on_hosts = "testhost" in path or path.startswith(("tests/fleet/", "tests/rehearsal/", "tests/e2e/"))
        if on_hosts and re.search(r"""["']repro_py\.tune["']""", (ROOT / path).read_text(encoding="utf-8")):
            tuners.add(path)
    # the fleet's: through production's path, interrupted and resumed; the rehearsal's: the operator's vaulted
    # inventory
    assert tuners == {"tests/fleet/test_fleet_tune_testhost.py", "tests/rehearsal/test_rehearsal.py"}, tuners
