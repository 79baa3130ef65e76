"""Run candidate code against hidden tests in a constrained subprocess.

The child is ``python -I -S`` (isolated mode, no site packages) in a fresh
temporary directory with an empty environment, in its own session (so a
timeout kills the whole group), under ``resource`` limits: CPU seconds,
address space, file size, no core dumps and a process count. The network is
removed by running it in a new network namespace (``unshare --net``, or
``unshare -rn`` where only user namespaces are allowed) when that works on
this machine; an in-process guard that refuses socket creation is always
installed as well. The result records which isolation was in force.

The harness reads a one-time token from stdin and prints it only after every
test ran, so code that exits early (``sys.exit(0)``, ``os._exit``) cannot pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

Outcome = Literal["passed", "assertion_failed", "exception", "timeout"]

_HARNESS = r'''
import sys
token = sys.stdin.readline().strip()
guard = sys.stdin.readline().strip() == "guard"
limits = [int(x) for x in sys.stdin.readline().split()]

def _apply_limits(cpu_s, as_bytes, fsize_bytes, nproc):
    import resource
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_bytes, fsize_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

_apply_limits(*limits)
del _apply_limits

def _install_socket_guard():
    import socket, _socket
    def _refuse(*args, **kwargs):
        raise OSError("network access is disabled in the sandbox")
    class _NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            _refuse()
    socket.socket = _NoSocket
    _socket.socket = _NoSocket
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
    socket.socketpair = _refuse
    socket.fromfd = _refuse

if guard:
    _install_socket_guard()
del _install_socket_guard

def _fail(code, kind, exc):
    import traceback
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.write("\n@@SANDBOX " + kind + ": " + type(exc).__name__ + ": " + str(exc)[:500] + "\n")
    sys.stderr.flush()
    import os
    os._exit(code)

namespace = {"__name__": "__candidate__"}
try:
    with open("candidate.py", encoding="utf-8") as fh:
        exec(compile(fh.read(), "candidate.py", "exec"), namespace)
except BaseException as exc:
    _fail(12, "load", exc)
try:
    with open("tests.py", encoding="utf-8") as fh:
        exec(compile(fh.read(), "tests.py", "exec"), namespace)
except AssertionError as exc:
    _fail(10, "assertion", exc)
except BaseException as exc:
    _fail(11, "exception", exc)
sys.stdout.write("\n" + token + "\n")
sys.stdout.flush()
'''


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    file_size_mb: int = 16
    nproc: int = 32


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    outcome: Outcome
    detail: str
    returncode: int | None
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    isolation: str

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _probe(prefix: list[str]) -> bool:
    try:
        proc = subprocess.run(
            [*prefix, sys.executable, "-I", "-S", "-c", "pass"],
            capture_output=True, timeout=10, check=False, env={},
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[tuple[str, ...], str]:
    """(command prefix, description) of the strongest network isolation that works here."""
    unshare = shutil.which("unshare")
    if unshare:
        for flags, name in ((["--net"], "netns (unshare --net)"), (["-r", "-n"], "netns (unshare -rn)")):
            prefix = [unshare, *flags, "--"]
            if _probe(prefix):
                return tuple(prefix), name + " + socket guard"
    return (), "socket guard only (in-process; no network namespace available)"


def _limits_line(limits: SandboxLimits) -> str:
    """The harness applies these with ``resource.setrlimit`` before it loads the candidate."""
    mb = 1024 * 1024
    return f"{limits.cpu_s} {limits.memory_mb * mb} {limits.file_size_mb * mb} {limits.nproc}"


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


def _marker(stderr: str) -> str:
    for line in reversed(stderr.splitlines()):
        if line.startswith("@@SANDBOX "):
            return line[len("@@SANDBOX ") :]
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def run_candidate(
    code: str, tests: str, *, limits: SandboxLimits | None = None, socket_guard: bool = True
) -> SandboxResult:
    """Execute ``code`` then ``tests`` (asserts) in the sandbox and say how it went.

    ``socket_guard=False`` leaves the network to the namespace alone (tests use
    it to show the namespace by itself blocks connections).
    """
    limits = limits or SandboxLimits()
    prefix, isolation = network_isolation()
    if not socket_guard:
        isolation = isolation.replace(" + socket guard", "") if prefix else "none"
    token = secrets.token_hex(16)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="codeeval-") as tmp:
        work = Path(tmp)
        (work / "candidate.py").write_text(code, encoding="utf-8")
        (work / "tests.py").write_text(tests, encoding="utf-8")
        (work / "harness.py").write_text(_HARNESS, encoding="utf-8")
        cmd = [*prefix, sys.executable, "-I", "-S", "harness.py"]
        # No preexec_fn (unsafe when the caller has threads, as the gate's worker threads do):
        # the harness sets its own limits first thing.
        proc = subprocess.Popen(
            cmd, cwd=work, env={}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, text=True,
        )
        timed_out = False
        try:
            out, err = proc.communicate(
                token + "\n" + ("guard" if socket_guard else "none") + "\n" + _limits_line(limits) + "\n",
                timeout=limits.timeout_s,
            )
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    duration = time.monotonic() - start
    rc = proc.returncode

    def result(outcome: Outcome, detail: str) -> SandboxResult:
        return SandboxResult(outcome, detail, rc, duration, _tail(out), _tail(err), isolation)

    if timed_out:
        return result("timeout", f"no result within {limits.timeout_s:g}s wall time (killed)")
    if rc is not None and rc < 0 and -rc in (signal.SIGXCPU, signal.SIGKILL):
        return result("timeout", f"killed by {signal.Signals(-rc).name} (CPU limit {limits.cpu_s}s)")
    if rc == 0 and out.rstrip().endswith(token):
        return result("passed", "all tests passed")
    if rc == 10:
        return result("assertion_failed", _marker(err))
    if rc in (11, 12):
        return result("exception", _marker(err))
    if rc == 0:
        return result("exception", "the process exited before the tests finished (early exit)")
    if rc is not None and rc < 0:
        return result("exception", f"killed by signal {signal.Signals(-rc).name}")
    return result("exception", f"exit code {rc}: {_marker(err)}")
