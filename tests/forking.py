"""What ansible-runner does beside the tools' numpy work: fork, again and again, from another thread.

For the tests that run a computation in a child beside forks (tests/gates/test_distribution_fork.py,
tests/tune/test_blas_threads.py): ``start_forking()`` forks every few milliseconds until the event it returns
is set. Each child exits at once, as the exec of a play would replace it.
"""

from __future__ import annotations

import os
import threading
import time


def start_forking(every_s: float = 0.005) -> threading.Event:
    stop = threading.Event()

    def fork_repeatedly() -> None:
        while not stop.is_set():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            time.sleep(every_s)

    threading.Thread(target=fork_repeatedly, daemon=True).start()
    return stop
