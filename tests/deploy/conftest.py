"""Helpers for the deployment tests: run ansible-playbook from the repository root."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _ansible_playbook() -> str:
    candidate = BIN / "ansible-playbook"
    return str(candidate) if candidate.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")


@pytest.fixture(scope="session")
def run_playbook() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ansible-playbook in the repository root (its ansible.cfg applies); never prompts."""
    if not (BIN / "ansible-playbook").exists() and shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook is not installed")

    def run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        }
        return subprocess.run(
            [_ansible_playbook(), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    return run


def load_module(name: str, path: Path) -> ModuleType:
    """Import a module file; the collection's module_utils it imports resolve by their collection name
    (``ansible_collections.ddtree.sglang.plugins.module_utils``: the checkout's ``.collections`` is on the path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wants_testhost() -> bool:
    return os.environ.get("SGLANG_TESTHOST") == "1"


@pytest.fixture(scope="module")
def wheel() -> zipfile.ZipFile:
    """The pinned sglang 0.5.23 wheel (patches/tools/series.py; cached in .cache/sglang-wheel/), read, never
    imported; skipped when it cannot be fetched, failed when CI demands it (REPRO_REQUIRE_SGLANG_CPU=1)."""
    sys.path.insert(0, str(ROOT / "patches" / "tools"))
    import series  # noqa: PLC0415

    try:
        path = series.fetch_wheel()
    except series.SeriesError as exc:
        if os.environ.get("REPRO_REQUIRE_SGLANG_CPU") == "1":
            pytest.fail(f"the pinned sglang wheel is unavailable: {exc}", pytrace=False)
        pytest.skip(f"the pinned sglang wheel is unavailable: {exc}")
    return zipfile.ZipFile(path)
