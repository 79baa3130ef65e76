"""The sampled gate's permutation test beside a fork in another thread of the same process.

A fleet sweep or tuning run judges one host's sampled gate (``same_distribution``, in a worker thread) while
ansible-runner forks to start a play for another host. With the counts taken as a matrix product, OpenBLAS ran
it on its thread pool, the fork's handler shut the pool down under the running call, and the call spun at 100%
CPU forever (the fleet tuner test hung so, its thread waiting in ``exec_blas``). Run in a child process with a
watchdog, so that a hang fails this test instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import os, random, time
    from concurrent.futures import ThreadPoolExecutor
    from repro_py.gates.distribution import same_distribution
    from tests.forking import start_forking

    rng = random.Random(0)
    def side():
        return {p: [[9841] + [rng.randrange(40) for _ in range(5)] for _ in range(150)] for p in ("a", "b", "c")}
    base, tested = side(), side()

    def judge(_):
        return [same_distribution(base, tested, tokens=6, alpha=0.001, permutations=1999).p_value
                for _ in range(8)]

    stop = start_forking()  # what ansible-runner (pexpect) does to start each play
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(judge, i) for i in range(3)]
        deadline = time.monotonic() + 90
        while not all(f.done() for f in futures):
            if time.monotonic() > deadline:
                print("HUNG: the permutation tests still ran after 90 s", flush=True)
                os._exit(3)
            time.sleep(0.2)
    stop.set()
    values = [f.result() for f in futures]
    assert all(v == values[0] for v in values), values  # the same data, the same seed: the same p-values
    print("done", len(values) * len(values[0]))
    """
)


def test_the_permutation_test_finishes_beside_forks_in_other_threads() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
                          check=False)  # fmt: skip
    assert proc.returncode == 0 and "done 24" in proc.stdout, proc.stdout + proc.stderr[-3000:]
