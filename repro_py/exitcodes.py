"""Named process exit codes shared by every ``python -m repro_py.<cmd>``."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILURE = 1  # the command ran but what it checked failed (a gate, a verify)
    USAGE = 2  # bad command line or bad input; nothing was changed
    LEASED = 3  # the host is leased to another run (a sweep or a deploy), or sudo wants a password; nothing was changed
    NO_SANDBOX = 4  # no isolating sandbox for the coding gate and --allow-unisolated not given; nothing was judged
    INTERRUPTED = 130  # Ctrl-C; state left resumable
