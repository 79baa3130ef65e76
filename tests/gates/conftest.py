"""Simulated engines as real processes for the gates tests (loopback ports, one model directory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from repro_py.simengine.process import Engine
from repro_py.simengine.testing import EngineGroup

FAST = ["--sim-load-seconds", "0", "--sim-warmup-seconds", "0", "--sim-speed", "200", "--reasoning-parser", "kimi_k2"]


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[Callable[[list[str]], Engine]]:
    """Start simulated engines and wait until each is ready; all are stopped at teardown."""
    group = EngineGroup(tmp_path / "models", FAST)
    yield group.start
    group.stop_all()
