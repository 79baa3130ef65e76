"""Simulated engines as real processes for the bench tests (loopback ports, one model directory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from repro_py.simengine.process import REPO_ROOT, Engine
from repro_py.simengine.testing import EngineGroup

FAST = ["--sim-load-seconds", "0", "--sim-warmup-seconds", "0"]


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[Callable[[list[str]], Engine]]:
    """Start simulated engines and wait until each is ready; all are stopped at teardown."""
    group = EngineGroup(tmp_path / "models", FAST)
    yield group.start
    group.stop_all()


def bench_and_kill(eng: Engine, args: list[str], *, served: int) -> subprocess.CompletedProcess[str]:
    """Run ``python -m repro_py.bench --url ENGINE ARGS`` and SIGKILL the engine once it has taken ``served``
    generation requests; the benchmark's exit status and output."""
    bench = subprocess.Popen([sys.executable, "-m", "repro_py.bench", "--url", eng.url, *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 60
        while int(eng.get_json("/server_info")["sim"]["generation_requests"]) < served:
            assert time.monotonic() < deadline and bench.poll() is None
            time.sleep(0.02)
        os.kill(eng.pid, signal.SIGKILL)
        stdout, stderr = bench.communicate(timeout=180)
    finally:
        if bench.poll() is None:
            bench.kill()
    return subprocess.CompletedProcess(bench.args, bench.returncode, stdout, stderr)
