"""Name the cause of a failed engine start in plain words (stdlib only).

``cause(lines)`` reads one invocation's journal lines and returns the first
cause it recognises (the most specific rule wins when several match):
``(key, words, line)`` or ``None``. ``explain(state, lines)`` puts the cause
first and the systemd state after it as detail::

    out of memory on a GPU (torch.OutOfMemoryError: CUDA out of memory...);
    systemd: the engine exited during startup: unit activating/auto-restart, Result=exit-code, ...

Used on the host by ``sglang_wait_ready`` (a failed start) and on the
controller by the sweep (a crash during the benchmark), from this one file.
"""

from __future__ import annotations

import re

# (key, plain words, pattern); the order is the precedence.
RULES = (
    (
        "out_of_memory",
        "out of memory on a GPU",
        re.compile(r"OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation", re.I),
    ),
    ("out_of_memory", "out of memory", re.compile(r"\bout of memory\b|MemoryError|oom-kill", re.I)),
    ("import_error", "a Python module could not be imported", re.compile(r"ModuleNotFoundError|ImportError")),
    (
        "port_in_use",
        "the port is already in use",
        re.compile(r"Address already in use|\[Errno 98\]|EADDRINUSE", re.I),
    ),
    (
        "start_limit",
        "systemd refused the start (start limit hit)",
        re.compile(r"start-limit-hit|Start request repeated too quickly"),
    ),
    (
        "nccl_error",
        "an NCCL (multi-GPU communication) error",
        re.compile(r"NCCL error|ncclSystemError|ncclInternalError"),
    ),
    ("cuda_error", "a CUDA error", re.compile(r"CUDA error|cudaError|CUBLAS_STATUS|no CUDA-capable device", re.I)),
    ("file_missing", "a file the engine needs is missing", re.compile(r"FileNotFoundError|No such file or directory")),
    (
        "simulated_fault",
        "the simulated engine's injected fault",
        re.compile(r"SIMULATED fault ([\w-]+(?::\d+)?)"),
    ),
    ("segfault", "the engine crashed (segmentation fault)", re.compile(r"Segmentation fault|SIGSEGV|status=11/SEGV")),
    ("killed", "the engine was killed by a signal", re.compile(r"status=9/KILL|killed by signal|Killed\b")),
    ("traceback", "the engine raised an exception", re.compile(r"Scheduler hit an exception|Traceback \(most recent")),
)
_EXCEPTION_LINE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$")
_LIMIT = 240


def _message(line):
    """A journal line without its ``short-iso`` prefix (``TIME HOST UNIT[PID]: ``)."""
    head, sep, rest = line.partition("]: ")
    return rest if sep and " " in head else line


def _clip(text, limit=_LIMIT):
    text = _message(text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cause(lines):
    """The first recognised cause in ``lines``: ``(key, words, the line that shows it)`` or None."""
    lines = [str(line) for line in lines or ()]
    for key, words, pattern in RULES:
        for line in lines:
            found = pattern.search(line)
            if not found:
                continue
            if key == "simulated_fault":
                return key, f"{words} {found.group(1)}", _clip(line)
            elif key == "traceback":
                exc = next((m for m in map(_EXCEPTION_LINE.search, lines) if m), None)
                if exc is not None:
                    return key, f"{words} ({exc.group(1)})", _clip(exc.group(0))
            return key, words, _clip(line)
    return None


def explain(state, lines):
    """The cause in plain words first, then the systemd state (``state``) as detail."""
    found = cause(lines)
    if found is None:
        return f"{state} (no known cause in the journal lines of this invocation)" if lines else state
    _key, words, line = found
    return f"{words} ({line}); systemd: {state}"
