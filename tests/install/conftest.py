"""Fixtures for the install-side tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from install_helpers import CHECK_LOCKS_PATH, MODULE_PATH, load_path, make_site_packages


@pytest.fixture(scope="session")
def sps() -> ModuleType:
    return load_path("sglang_patch_series", MODULE_PATH)


@pytest.fixture(scope="session")
def check_locks() -> ModuleType:
    return load_path("check_locks", CHECK_LOCKS_PATH)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    sp = make_site_packages(tmp_path)
    return {
        "root": tmp_path,
        "venv": tmp_path / "venv",
        "sp": sp,
        "state": tmp_path / "var" / "sglang-patches.state.json",
        "pristine": tmp_path / "var" / "pristine",
    }


@pytest.fixture
def run_series(sps: ModuleType, tree: dict[str, Path]) -> Callable[..., dict[str, object]]:
    def run(patches: list[tuple[str, str]], check_mode: bool = False, target: str = "0.5.23") -> dict[str, object]:
        params = {
            "venv_path": str(tree["venv"]),
            "site_packages": None,
            "package": "sglang",
            "target_version": target,
            "patches": [{"name": n, "content": c} for n, c in patches],
            "state_path": str(tree["state"]),
            "pristine_dir": str(tree["pristine"]),
            "patch_executable": "patch",
        }
        result: dict[str, object] = sps.PatchSeries(params, check_mode=check_mode).run()
        return result

    return run
