"""What only tests need of the simulated engine, beside :mod:`repro_py.simengine.process` (start, wait, stop).

    from repro_py.simengine.process import start_engine
    from repro_py.simengine.testing import ddtree_flags
    with start_engine(ddtree_flags(), model_root=tmp_path) as eng:
        eng.wait_ready()

Product code never imports this module (tests/layout/test_layers.py holds it so).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from repro_py import spec_config
from repro_py.simengine.process import REPO_ROOT, Engine, engine_command, engine_env, start_engine


def ddtree_flags(budget: int = 8, topk: int = 4, window: int | None = 2048, block: int = 8) -> list[str]:
    """A DDTree config's engine flags, as the sweep and the role write them (the drafter path is added on start)."""
    cfg = spec_config.SpecConfig(algorithm="ddtree", budget=budget, topk=topk, window=window, block_size=block)
    return spec_config.to_engine_flags(cfg, drafter_path=None)


class EngineGroup:
    """Engines that share one model directory (the same model for every config, as on a host).

    ``start(args)`` starts one with ``args`` + ``extra_args`` and waits until it is ready;
    ``stop_all()`` stops every one started (a fixture's teardown).
    """

    def __init__(self, model_root: Path, extra_args: list[str], ready_timeout: float = 60.0) -> None:
        self.model_root = model_root
        self.extra_args = list(extra_args)
        self.ready_timeout = ready_timeout
        self.engines: list[Engine] = []

    def start(self, args: list[str]) -> Engine:
        eng = start_engine([*args, *self.extra_args], model_root=self.model_root)
        self.engines.append(eng)
        eng.wait_ready(timeout=self.ready_timeout)
        return eng

    def stop_all(self) -> None:
        for eng in self.engines:
            eng.stop()


def run_engine_cli(args: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run the engine's command line to completion (for refused-flag tests)."""
    return subprocess.run(
        engine_command(args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=engine_env(),
        cwd=str(REPO_ROOT),
        check=False,
    )
