"""``make test`` leaves nothing of its own in /tmp, nor does a benchmark.

Run after run, a directory the suite makes and never removes adds up: the rehearsal's bare clone of this
repository (8 MB and growing with it), its apt and hub mirrors, and the bare-host checks' step logs were left in
/tmp by every run. Test code takes its temporary directories from pytest (``tmp_path``, ``tmp_path_factory``:
the last three runs' are kept, older ones removed) or removes what it makes with ``tempfile.mkdtemp`` itself; the
stage scripts ``make test`` runs write their logs under the run's results directory.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.layout.test_make_test_lanes import dry_run

ROOT = Path(__file__).resolve().parents[2]
REMOVERS = {"shutil.rmtree", "atexit.register"}


def kept_temporary_directories(path: Path, root: Path = ROOT) -> list[str]:
    """The functions of ``path`` that call ``tempfile.mkdtemp`` and neither remove the directory nor have it removed
    at exit (no ``shutil.rmtree`` or ``atexit.register`` call in the same function)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            called = {ast.unparse(call.func) for call in ast.walk(node) if isinstance(call, ast.Call)}
            if "tempfile.mkdtemp" in called and not called & REMOVERS:
                found.append(f"{path.relative_to(root)}: {node.name}")
    return found


@pytest.mark.parametrize("folder", ["tests", "benchmarks"])
def test_every_temporary_directory_made_is_removed(folder: str) -> None:
    """The suite's and the benchmarks' alike: a benchmark is run by hand, again and again, and each run's engines'
    model directories left in /tmp add up as the suite's would."""
    kept = [name for path in sorted((ROOT / folder).rglob("*.py")) for name in kept_temporary_directories(path)]
    assert not kept, (
        f"tempfile.mkdtemp without removal (use tmp_path_factory or tempfile.TemporaryDirectory, or remove it): {kept}"
    )


def test_the_check_finds_a_directory_that_is_never_removed(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    module = tmp_path / "tests" / "test_kept.py"
    module.write_text(
        "import shutil, tempfile\n"
        "def kept():\n    return tempfile.mkdtemp()\n"
        "def removed():\n    d = tempfile.mkdtemp()\n    shutil.rmtree(d)\n",
        encoding="utf-8",
    )
    assert kept_temporary_directories(module, tmp_path) == ["tests/test_kept.py: kept"]


def test_the_host_checks_write_their_step_logs_under_the_runs_results() -> None:
    commands = dry_run("host-checks-run")
    logs = f"{ROOT}/results/host-checks"
    assert f"rm -rf {logs}\nHOSTCHECKS_LOGS={logs} tests/install/run-host-checks.sh" in commands, commands
    script = (ROOT / "tests" / "install" / "run-host-checks.sh").read_text(encoding="utf-8")
    assert "log=$HOSTCHECKS_LOGS" in script and 'mkdir -p "$log"' in script
