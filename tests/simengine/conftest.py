"""Fixtures: start the simulated engine as a real process on a free loopback port."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from repro_py.simengine.process import Engine, start_engine
from repro_py.simengine.testing import ddtree_flags

FAST = ["--sim-load-seconds", "0.2", "--sim-warmup-seconds", "0.1"]
DDTREE_B8 = ddtree_flags(budget=8, topk=4, window=2048, block=8)
DFLASH_B8 = ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8",
             "--speculative-draft-window-size", "2048"]

EngineFactory = Callable[..., Engine]


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[EngineFactory]:
    """``engine_factory(args, **kw) -> Engine``; every engine is stopped at teardown."""
    started: list[Engine] = []

    def factory(args: list[str], **kwargs: object) -> Engine:
        eng = start_engine(args, model_root=kwargs.pop("model_root", tmp_path), **kwargs)  # type: ignore[arg-type]
        started.append(eng)
        return eng

    yield factory
    for eng in started:
        eng.stop(timeout=5)


def _shared_engine(tmp_path_factory: pytest.TempPathFactory, spec_flags: list[str]) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("models")
    eng = start_engine(
        [
            *spec_flags,
            *FAST,
            "--sim-speed",
            "50",
            "--enable-metrics",
            "--reasoning-parser",
            "kimi_k2",
            "--api-key",
            "sk-test",
            "--served-model-name",
            "kimi-k2.6-sim",
        ],
        model_root=root,
    )
    try:
        eng.wait_ready(30)
        yield eng
    finally:
        eng.stop(timeout=5)


@pytest.fixture(scope="module")
def ddtree_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One ready DDTree b8 t4 engine (speed 50, metrics, kimi_k2 parser, API key) shared by a module.

    Like the patched server, it serves greedy requests only (temperature 0 or top_k 1)."""
    yield from _shared_engine(tmp_path_factory, DDTREE_B8)


@pytest.fixture(scope="module")
def dflash_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The same engine with plain DFLASH (no tree): it serves sampling and every sglang request shape."""
    yield from _shared_engine(tmp_path_factory, DFLASH_B8)
