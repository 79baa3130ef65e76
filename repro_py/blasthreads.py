"""One BLAS thread for the tools that fork while numpy computes: ``python -m repro_py.tune`` and ``.sweep``.

Their numpy work is small (the tuner's Gaussian process: its observations against a few hundred candidates),
and it runs beside threads that fork: ansible-runner starts each play with a fork, for another host of a fleet
or the same run's next restart. OpenBLAS's fork handler shuts its thread pool down, and a product running on
that pool at that moment (the prediction's solve once a run has some 200 observations; the sampled gate's
counts were one until they stopped being a product) then spins at 100% CPU forever, and a later fork can wait
in that handler holding Python's lock, which freezes every thread of the tool. With one BLAS thread
every product runs in its caller's thread and there is no pool to lose. The variable is read when numpy
loads, so the entry points call :func:`one_blas_thread` before importing anything that imports numpy.
"""

from __future__ import annotations

import os

#: The thread count of the OpenBLAS that numpy's wheels carry (read once, when numpy loads). Only this one: the
#: plays and engines these tools start inherit the environment, and nothing else here reads a BLAS.
VARIABLE = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> None:
    """Set OpenBLAS's thread count to 1 (before numpy is imported; see the module doc)."""
    os.environ[VARIABLE] = "1"
