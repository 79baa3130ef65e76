"""Shared fixtures of the patch-series tests.

Two kinds of tests live here:
- tests/patches/test_*.py run in the project's test venv (stdlib + pytest):
  the series applies / reverse-applies / byte-compiles / regenerates.
- tests/patches/cpu/check_*.py need torch and sglang: they run inside the CPU
  sglang venv (patches/tools/make-cpu-venv.sh), driven by
  test_ddtree_cpu_suite.py through a subprocess. They are named check_*.py so
  the project venv never collects them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = REPO_ROOT / "patches" / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import series  # noqa: E402

# The check_*.py files need the CPU venv; only its runner (which sets
# DDTREE_TEST_DEVICE) may load tests/patches/cpu/conftest.py.
collect_ignore = [] if os.environ.get("DDTREE_TEST_DEVICE") else ["cpu"]


def cpu_venv_python() -> Path:
    venv = Path(os.environ.get("SGLANG_CPU_VENV", REPO_ROOT / ".venv-sglang-cpu"))
    return venv / "bin" / "python"


def require(condition: bool, message: str) -> None:
    """Skip when a prerequisite is missing, but FAIL when CI demands it."""
    if condition:
        return
    if os.environ.get("REPRO_REQUIRE_SGLANG_CPU") == "1":
        pytest.fail(f"REPRO_REQUIRE_SGLANG_CPU=1 and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pristine_wheel() -> Path:
    try:
        return series.fetch_wheel()
    except series.SeriesError as e:
        require(False, f"the pinned sglang wheel is unavailable: {e}")
        raise


@pytest.fixture(scope="session")
def patched_tree(pristine_wheel, tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("ddtree") / "tree"
    series.unpack(tree, pristine_wheel)
    series.apply_series(tree)
    return tree


@pytest.fixture(scope="session")
def cpu_python() -> Path:
    py = cpu_venv_python()
    require(
        py.exists(),
        f"the CPU sglang venv is missing ({py}); create it with patches/tools/make-cpu-venv.sh",
    )
    return py
