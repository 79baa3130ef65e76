"""The tuner's Gaussian process beside forks in other threads: ``repro_py.blasthreads`` keeps it from hanging.

The predict step solves against a few hundred candidates; with a long run's 200 observations OpenBLAS runs that
on its thread pool, and a fork in another thread (ansible-runner starting a play) shuts the pool down under it:
the call spins forever. Each case
runs in a child with a watchdog: with the entry points' setting (one BLAS thread) it finishes; without it, it
hangs, which shows that this test can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import os, sys, threading
    if sys.argv[1] == "one-thread":
        from repro_py.blasthreads import one_blas_thread
        one_blas_thread()
    import numpy as np
    from repro_py.tune.surrogate import GaussianProcess
    from tests.forking import start_forking

    rng = np.random.default_rng(0)
    x, candidates = rng.random((200, 4)), rng.random((500, 4))  # a long run's observations, a space's candidates
    gp = GaussianProcess().fit(x, rng.random(200), np.full(200, 0.01))

    def predict():
        for _ in range(40):
            gp.predict(candidates)

    stop = start_forking()  # what ansible-runner (pexpect) does to start each play
    worker = threading.Thread(target=predict, daemon=True)
    worker.start()
    worker.join(float(sys.argv[2]))
    stop.set()
    print("HUNG" if worker.is_alive() else "done", flush=True)
    os._exit(3 if worker.is_alive() else 0)
    """
)


def run_child(mode: str, watchdog_s: float) -> subprocess.CompletedProcess[str]:
    """The child's own watchdog, or this one when the hang took the child's interpreter with it (a fork blocked
    in OpenBLAS's fork handler holds the GIL, so the child's watchdog never runs): killed, it reads as a hang."""
    cmd = [sys.executable, "-c", CHILD, mode, str(watchdog_s)]
    try:
        return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=watchdog_s + 30,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 3, "HUNG (killed: its own watchdog could not run)\n", "")


def test_with_one_blas_thread_the_predictions_finish_beside_forks() -> None:
    proc = run_child("one-thread", 90)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_without_it_the_same_predictions_hang_on_this_numpy() -> None:
    """The hazard the setting removes is real on the numpy this bundle pins (else the test above proves nothing)."""
    proc = run_child("default", 6)
    if proc.returncode == 0:
        pytest.skip("this machine's BLAS did not hang without the setting (one core, or a BLAS without a pool)")
    assert proc.returncode == 3 and "HUNG" in proc.stdout, proc.stdout + proc.stderr[-3000:]


#: Runs ``python -m repro_py.<tool> --help`` in this process and reports what numpy found when it loaded.
ENTRY = textwrap.dedent(
    """
    import os, runpy, sys
    sys.argv = [sys.argv[1], "--help"]
    try:
        runpy.run_module(f"repro_py.{sys.argv[0]}", run_name="__main__")
    except SystemExit:
        pass
    print("numpy loaded:", "numpy" in sys.modules, "OPENBLAS_NUM_THREADS:", os.environ.get("OPENBLAS_NUM_THREADS"))
    """
)


@pytest.mark.parametrize("tool", ["tune", "sweep"])
def test_the_entry_points_set_it_before_numpy_loads(tool: str) -> None:
    main = (REPO_ROOT / "repro_py" / tool / "__main__.py").read_text()
    assert main.index("one_blas_thread()") < main.index(f"from repro_py.{tool}.cli import")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", ENTRY, tool], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert "OPENBLAS_NUM_THREADS: 1" in proc.stdout, proc.stdout[-500:] + proc.stderr[-2000:]
