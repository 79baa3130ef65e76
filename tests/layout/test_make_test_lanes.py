"""What `make test`'s lanes run: every stage once, in one lane; every test file once, by one stage; side lane 1
started once the wheelhouse has passed, side lane 2 once the unit tests have (no more test hosts beside the unit
tests than the rehearsal's); the tuner's and the sweep's end-to-end runs on test hosts only where each run is of
its own kind (the fleet's, the rehearsal's), not again on molecule's instance or the main test host. Read from make
itself (``make -pn`` for the lanes, ``make -n STAGE`` for what a stage runs), not from the Makefile's text."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import yaml

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
    recipe = subprocess.run(["make", "-n", "--no-print-directory", "test"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True).stdout  # fmt: skip (the flag: under make, no Entering lines)
    # scripts/timed-stages.sh NAME TIMES 'MAIN' ['SIDE' AFTER]...
    words = shlex.split(recipe.replace("\\\n", " "))
    args = words[words.index("scripts/timed-stages.sh") + 3 :]
    assert args == [lanes["TEST_STAGES"], lanes["SIDE_LANE_1"], "wheelhouse", lanes["SIDE_LANE_2"], "unit"], recipe
    main = lanes["TEST_STAGES"].split()
    assert main.index("wheelhouse") < main.index("unit") < main.index("molecule-testhost-run")
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
    assert "tests/fleet/test_fleet_tune_testhost.py" in seen and "tests/rehearsal/test_rehearsal.py" in seen, seen


def on_test_hosts_running(module: str) -> set[str]:
    """The test files of the stages that run ``python -m MODULE`` against a test host."""
    found = set()
    runs = re.compile(rf"""["']{re.escape(module)}["']|-m {re.escape(module)}\b""")
    for path in set().union(*files_by_stage().values()):
        on_hosts = "testhost" in path or path.startswith(("tests/fleet/", "tests/rehearsal/", "tests/e2e/"))
        if on_hosts and runs.search((ROOT / path).read_text(encoding="utf-8")):
            found.add(path)
    return found


def test_the_tuner_runs_end_to_end_on_test_hosts_only_on_the_fleet_and_in_the_rehearsal() -> None:
    # the fleet's: through production's path, interrupted and resumed; the rehearsal's: the operator's vaulted
    # inventory
    tuners = on_test_hosts_running("repro_py.tune")
    assert tuners == {"tests/fleet/test_fleet_tune_testhost.py", "tests/rehearsal/test_rehearsal.py"}, tuners


def test_the_sweep_runs_end_to_end_on_test_hosts_only_on_the_fleet_and_in_the_rehearsal() -> None:
    """One sweep per kind of run, not one per stage: REPRODUCE.md's (Ctrl-C and --resume as the operator types
    them), the shipped inventories' (a failing config each, both lossless modes, what each restart ran read from
    the host) and the fleet's (a host lost mid-run). A sweep of its own on the main test host repeated them."""
    sweeps = on_test_hosts_running("repro_py.sweep")
    assert sweeps == {"tests/rehearsal/test_reproduce.py", "tests/rehearsal/test_rehearsal.py",
                      "tests/fleet/test_fleet_sweep_testhost.py"}, sweeps  # fmt: skip


def test_molecule_converges_checks_idempotence_and_behaviour_and_reconfigures_nothing() -> None:
    """`molecule test` proves the roles on a systemd host (converge, idempotence, a real request); the reconfigures
    (an answer from the new invocation, the rollback, refusals, the restore) are the service checks' on the same kind
    of host through the same playbook, and the unit tests' (refusals before any host task)."""
    scenario = ROOT / "molecule" / "default"
    sequence = yaml.safe_load((scenario / "molecule.yml").read_text(encoding="utf-8"))["scenario"]["test_sequence"]
    assert [s for s in sequence if s in ("create", "converge", "idempotence", "verify", "destroy")] == [
        "destroy", "create", "converge", "idempotence", "verify", "destroy"], sequence  # fmt: skip
    assert "side_effect" not in sequence, sequence
    plays = sorted(p.name for p in scenario.rglob("*.yml") if "playbooks/reconfigure.yml" in p.read_text("utf-8"))
    assert not plays, f"molecule's scenario reconfigures the service again: {plays}"


def test_the_main_test_host_is_deployed_once_by_molecules_scenario_and_the_service_checks_run_on_it() -> None:
    """One fresh converge of the main test host: molecule's (site.yml, idempotence, verify) on sglang-testhost, kept
    for the service checks, which follow it; no deploy-run of its own before it, nor a molecule instance of its own
    after. The instance is inventory/local's host: its host_vars are inventory/local's file, linked."""
    main = make_vars("TEST_STAGES")["TEST_STAGES"].split()
    assert "deploy-run" not in main and "molecule-run" not in main, main
    assert main.index("molecule-testhost-run") + 1 == main.index("service-checks-run"), main
    recipe = dry_run("molecule-testhost-run")
    # --destroy never skips the sequence's first destroy too: a host left from an earlier run is destroyed before
    molecule = f"SGLANG_MOLECULE_INSTANCE=sglang-testhost {ROOT / '.venv' / 'bin' / 'molecule'}"
    destroy, test = recipe.find(f"{molecule} destroy\n"), recipe.find(f"{molecule} test --destroy never\n")
    assert 0 <= destroy < test, recipe
    scenario = ROOT / "molecule" / "default"
    platforms = yaml.safe_load((scenario / "molecule.yml").read_text(encoding="utf-8"))["platforms"]
    assert [p["name"] for p in platforms] == ["${SGLANG_MOLECULE_INSTANCE:-sglang-molecule}"], platforms
    connection = ROOT / "inventory" / "local" / "host_vars" / "sglang-testhost" / "main.yml"
    # both instances connect as inventory/local's host does (sglang-molecule on ports of its own, in its main.yml)
    for linked in (scenario / "host_vars" / "sglang-testhost" / "main.yml",
                   scenario / "host_vars" / "sglang-molecule" / "connection.yml"):  # fmt: skip
        assert linked.resolve() == connection, linked
    for instance in ("sglang-molecule", "sglang-testhost"):  # both install from the scenario's own wheelhouse
        assert (scenario / "host_vars" / instance / "scenario.yml").resolve() == scenario / "vars" / "scenario.yml"
