from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from repro_py.simengine.testing import Engine, start_engine

FAST = ["--sim-load-seconds", "0", "--sim-warmup-seconds", "0"]


def ddtree_args(budget: int = 8, topk: int = 4, window: int | None = 2048, block: int = 8) -> list[str]:
    args = ["--speculative-algorithm", "DDTREE", "--speculative-dflash-block-size", str(block),
            "--speculative-ddtree-budget", str(budget), "--speculative-ddtree-topk-cap", str(topk)]
    if window is not None:
        args += ["--speculative-draft-window-size", str(window)]
    return args


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[Callable[[list[str]], Engine]]:
    """Start simulated engines (real processes, loopback ports, one model directory: the same model
    for every config, as on a host); all are stopped at teardown."""
    engines: list[Engine] = []

    def start(args: list[str]) -> Engine:
        eng = start_engine([*args, *FAST], model_root=tmp_path / "models")
        engines.append(eng)
        eng.wait_ready(timeout=60)
        return eng

    yield start
    for eng in engines:
        eng.stop()
