"""What `make test`'s lanes run on which test host: the tuner's end-to-end test runs once, in side lane 2 on
molecule's instance between `molecule test --destroy never` and `molecule destroy` (destroyed whatever the test's
outcome), not on the main lane's host after the sweep's. The recipe is run by make itself with its commands
replaced by recorders (``BIN``/``PY`` pointed at a directory of stand-ins), so its order and its failure paths
are what is checked, not its text."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECORDER = """#!/bin/sh
echo "$(basename "$0") $* | TUNE_E2E_INVENTORY=${TUNE_E2E_INVENTORY:-} \
MOLECULE_SCENARIO_DIRECTORY=${MOLECULE_SCENARIO_DIRECTORY:-}" >> "$CALLS"
case "$(basename "$0") $*" in *"$FAIL_ON"*) [ -n "$FAIL_ON" ] && exit 3;; esac
exit 0
"""


def make_vars(*names: str) -> dict[str, str]:
    out = subprocess.run(["make", "-pn", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        name, sep, value = line.partition(" := ")
        if sep and name in names:
            found[name] = value
    return found


def run_recipe(tmp_path: Path, fail_on: str = "") -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("molecule", "python"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "CALLS": str(calls), "FAIL_ON": fail_on}
    proc = subprocess.run(["make", "--no-print-directory", "molecule-e2e-tune-run", f"BIN={bin_dir}",
                           f"PY={bin_dir / 'python'}", f"RESULTS={tmp_path / 'results'}", "-o", "venv"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    return proc, calls.read_text().splitlines() if calls.exists() else []


def test_the_tuners_end_to_end_test_runs_once_on_molecules_instance_not_in_the_main_lane() -> None:
    lanes = make_vars("TEST_STAGES", "SIDE_LANE_1", "SIDE_LANE_2")
    assert "e2e-run" not in lanes["TEST_STAGES"].split() and "e2e-sweep-run" in lanes["TEST_STAGES"].split()
    assert "molecule-e2e-tune-run" in lanes["SIDE_LANE_2"].split()
    assert "molecule-run" not in f"{lanes['SIDE_LANE_1']} {lanes['SIDE_LANE_2']}".split()
    dry = subprocess.run(["make", "-n", "e2e-sweep-run"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=True).stdout  # fmt: skip
    assert "tests/e2e/test_sweep_testhost.py" in dry and "test_tune_testhost" not in dry


def test_the_molecule_inventory_is_molecules_own_variables() -> None:
    inv = ROOT / "tests/e2e/molecule-inventory"
    assert (inv / "group_vars").resolve() == (ROOT / "inventory/local/group_vars").resolve()
    assert (inv / "host_vars").resolve() == (ROOT / "molecule/default/host_vars").resolve()
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    molecule = yaml.safe_load((ROOT / "molecule/default/molecule.yml").read_text())
    assert list(hosts["all"]["children"]["sglang_servers"]["hosts"]) == [p["name"] for p in molecule["platforms"]]


def test_molecule_test_then_the_tuner_then_the_destroy(tmp_path: Path) -> None:
    proc, calls = run_recipe(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.split(" | ")[0].split()[:3] for c in calls] == [
        ["molecule", "test", "--destroy"], ["python", "-m", "pytest"], ["molecule", "destroy"]]  # fmt: skip
    assert "never" in calls[0] and "tests/e2e/test_tune_testhost.py" in calls[1]
    assert "TUNE_E2E_INVENTORY=tests/e2e/molecule-inventory" in calls[1]
    assert f"MOLECULE_SCENARIO_DIRECTORY={ROOT}/molecule/default" in calls[1]


@pytest.mark.parametrize(
    ("fail_on", "ran"),
    [
        ("-m pytest", ["molecule test", "python -m", "molecule destroy"]),
        ("molecule test", ["molecule test", "molecule destroy"]),
    ],
    ids=["tuner-test-fails", "molecule-test-fails"],
)
def test_a_failure_fails_the_stage_and_the_instance_is_destroyed(tmp_path: Path, fail_on: str, ran: list[str]) -> None:
    proc, calls = run_recipe(tmp_path, fail_on=fail_on)
    assert proc.returncode != 0
    assert [" ".join(c.split(" | ")[0].split()[:2]) for c in calls] == ran
