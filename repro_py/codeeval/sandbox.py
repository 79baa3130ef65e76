"""Run candidate code against hidden tests so that nothing inside can fake the verdict.

Two processes. The candidate's code runs in the sandbox (``sandbox_child``:
an isolated interpreter in the strongest isolation this machine offers, see
``isolation``), under resource limits (CPU seconds, address space, file size,
processes, open files, no core dumps), with a wall-clock limit and a cap on
what it may print. The hidden tests run HERE, in the judge, which the
candidate cannot reach: each test's calls of the candidate's functions go
over a pipe as plain data and come back as plain data (``sandbox_child``
explains the encoding), and the asserts compare them in this process. There
is no token to steal and no "passed" message to forge: the verdict is
whatever the judge's own asserts say. An early exit, a crash, a forged or
malformed reply, an unencodable result (say, an object whose ``__eq__``
always agrees) is never a pass.

Outcomes: ``passed``, ``assertion_failed`` (a hidden test's assert),
``exception`` (the candidate raised, failed to load, exited early, broke the
protocol), ``timeout`` (wall or CPU limit), ``output_limit`` (printed more
than allowed; killed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Literal

from repro_py.codeeval import isolation as iso
from repro_py.codeeval.sandbox_child import decode, encode

Outcome = Literal["passed", "assertion_failed", "exception", "timeout", "output_limit"]
CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py")
ISOLATIONS = ("bwrap", "namespaces", "none")
MAX_REPLY = 16 * 1024 * 1024
PROCESS_ENDED = "the sandbox's process ended"


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    file_size_mb: int = 16  # largest file it may write (and the size of its /sandbox tmpfs)
    nproc: int = 32
    nofile: int = 64
    output_kb: int = 1024  # stdout + stderr it may print before it is killed


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


class CandidateRaised(Exception):
    """The candidate's exception, carried into the test that called it."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class SandboxGone(Exception):
    """The sandbox stopped answering: it exited, was killed, or broke the protocol."""


class _Capped:
    """Drains one output pipe into at most ``cap`` bytes; past that it signals ``over``."""

    def __init__(self, stream: Any, cap: int, over: threading.Event) -> None:
        self.data = bytearray()
        self.cap, self.over, self.stream = cap, over, stream
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        total = 0
        for chunk in iter(functools.partial(self.stream.read1, 65536), b""):
            total += len(chunk)
            if len(self.data) < self.cap:
                self.data += chunk[: self.cap - len(self.data)]
            if total > self.cap:
                self.over.set()

    def text(self) -> str:
        self.thread.join(timeout=5)
        return self.data.decode("utf-8", errors="replace")


class _Session:
    """One sandbox process and the judge's side of its pipes."""

    def __init__(self, kind: str, limits: SandboxLimits, tmp: Path) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_s
        root = tmp / "root"
        root.mkdir()
        self.launch = iso.launch(kind, work_bytes=limits.file_size_mb << 20, root_dir=root)
        self.isolation = iso.describe(kind, self.launch.uid)
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        nproc = limits.nproc
        if self.launch.uid is None:  # the caller's uid: its other processes count against the limit too
            nproc += _processes_of(os.getuid())
        config = {
            "req_fd": req_r, "resp_fd": resp_w, "jail": self.launch.jail,
            "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb << 20,
                       "file_bytes": limits.file_size_mb << 20, "nproc": nproc, "nofile": limits.nofile},
        }
        python, _ = iso.interpreter()
        argv = [*self.launch.argv, python, "-I", "-S", "-c", CHILD_SOURCE.read_text(encoding="utf-8"),
                json.dumps(config)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(req_r, resp_w),
            cwd=tmp, env={}, start_new_session=True,
        )
        os.close(req_r)
        os.close(resp_w)
        self.over = threading.Event()
        cap = limits.output_kb * 1024
        self.out = _Capped(self.proc.stdout, cap, self.over)
        self.err = _Capped(self.proc.stderr, cap, self.over)
        self._buf = b""

    def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        data = (json.dumps(msg) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.req_w, data):]
        except (BrokenPipeError, OSError) as exc:
            raise SandboxGone(f"the sandbox stopped reading ({exc})") from None
        line = self._read_line()
        try:
            reply = json.loads(line)
        except ValueError:
            raise SandboxGone(f"the sandbox answered out of protocol: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise SandboxGone(f"the sandbox answered out of protocol: {line[:200]!r}")
        return reply

    def _read_line(self) -> bytes:
        while b"\n" not in self._buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if self.over.is_set():
                raise SandboxGone("output limit")
            ready, _, _ = select.select([self.resp_r], [], [], min(left, 0.1))
            if not ready:
                continue
            chunk = os.read(self.resp_r, 65536)
            if not chunk:
                raise SandboxGone(PROCESS_ENDED)
            self._buf += chunk
            if len(self._buf) > MAX_REPLY:
                raise SandboxGone("the sandbox sent an oversized reply")
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def finish(self) -> None:
        """Tell the sandbox to exit (the tests are done)."""
        with contextlib.suppress(OSError):
            os.write(self.req_w, b'{"op": "exit"}\n')

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.kill_uid()

    def kill_uid(self) -> None:
        """Everything still running as the sandbox's own uid (forks that left the process group)."""
        uid = self.launch.uid
        if uid is None:
            return
        for _ in range(20):  # a fork bomb may still be forking: until none is left
            pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _uid_of(e) == uid]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def close(self) -> int | None:
        with contextlib.suppress(OSError):
            os.close(self.req_w)
        try:
            self.proc.wait(timeout=max(0.5, min(5.0, self.deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait(timeout=10)
        self.kill_uid()
        with contextlib.suppress(OSError):
            os.close(self.resp_r)
        return self.proc.returncode


def _uid_of(entry: Path) -> int | None:
    """The uid of a /proc/PID entry, None for a zombie or a process gone meanwhile."""
    try:
        status = (entry / "status").read_text()
    except OSError:
        return None
    if "\nState:\tZ" in status:
        return None
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


def _processes_of(uid: int) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if entry.stat().st_uid == uid:
                    count += 1
    return count


def _proxy(session: _Session, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        reply = session.request({"op": "call", "name": name, "args": encode(list(args)), "kwargs": encode(kwargs)})
        if set(reply) == {"raised"} and isinstance(reply["raised"], dict):
            raised = reply["raised"]
            raise CandidateRaised(str(raised.get("type")), str(raised.get("message")))
        if set(reply) != {"value", "args"}:
            raise SandboxGone(f"the sandbox answered out of protocol: {str(reply)[:200]}")
        try:
            value, after = decode(reply["value"]), decode(reply["args"])
        except ValueError as exc:
            raise SandboxGone(f"the sandbox answered out of protocol: {exc}") from None
        for before, now in zip(args, after if isinstance(after, list) else [], strict=False):
            _write_back(before, now)  # in-place changes the candidate made to mutable arguments
        return value

    call.__name__ = name
    return call


def _write_back(before: Any, now: Any) -> None:
    if type(before) is list and type(now) is list:
        before[:] = now
    elif (type(before) is dict and type(now) is dict) or (type(before) is set and type(now) is set):
        before.clear()
        before.update(now)


@functools.lru_cache(maxsize=1)
def available_isolation() -> str:
    """The strongest isolation that works on this machine (probed once by a trivial candidate)."""
    for kind in ("bwrap", "namespaces"):
        try:
            result = run_candidate("def ok():\n    return 1\n", "assert ok() == 1\n", isolation=kind,
                                   limits=SandboxLimits(timeout_s=20.0))
        except (RuntimeError, OSError):
            continue
        if result.outcome == "passed":
            return kind
    return "none"


def isolation_in_force() -> str:
    """The description recorded with every verdict of this machine's sandbox."""
    kind = available_isolation()
    return iso.describe(kind, "a fresh uid per run" if os.geteuid() == 0 else None)


def _signal_of(rc: int | None) -> int | None:
    if rc is None:
        return None
    if rc < 0:
        return -rc
    return rc - 128 if rc > 128 else None  # bwrap and unshare report a killed child as 128 + signal


def run_candidate(
    code: str, tests: str, *, limits: SandboxLimits | None = None, isolation: str | None = None
) -> SandboxResult:
    """Load ``code`` in the sandbox and run ``tests`` (asserts) here against it; say how it went."""
    limits = limits or SandboxLimits()
    kind = isolation or available_isolation()
    if kind not in ISOLATIONS:
        raise ValueError(f"isolation={kind!r}: allowed {', '.join(ISOLATIONS)}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="codeeval-") as tmp:
        session = _Session(kind, limits, Path(tmp))
        outcome: Outcome = "passed"
        detail = "all tests passed"
        try:
            loaded = session.request({"op": "load", "code": code})
            if set(loaded) == {"raised"}:
                raise CandidateRaised(str(loaded["raised"].get("type")), str(loaded["raised"].get("message")))
            names = loaded.get("loaded")
            if set(loaded) != {"loaded"} or not isinstance(names, list):
                raise SandboxGone(f"the sandbox answered out of protocol: {str(loaded)[:200]}")
            scope = {n: _proxy(session, n) for n in names if isinstance(n, str) and n.isidentifier()}
            # the project's own hidden tests, here in the judge
            exec(compile(tests, "tests.py", "exec"), {"__name__": "__tests__", **scope})
            session.finish()
        except AssertionError as exc:
            outcome, detail = "assertion_failed", f"AssertionError: {exc}".rstrip(": ")
        except CandidateRaised as exc:
            if exc.kind == "CPULimitExceeded":
                outcome, detail = "timeout", f"CPU limit {limits.cpu_s}s exceeded"
            else:
                outcome, detail = "exception", str(exc)
        except TimeoutError:
            outcome, detail = "timeout", f"no result within {limits.timeout_s:g}s wall time (killed)"
        except SandboxGone as exc:
            outcome, detail = "exception", str(exc)
        except Exception as exc:  # a test that raised on a candidate's value
            outcome, detail = "exception", f"{type(exc).__name__}: {exc}"
        ended_itself = outcome == "exception" and detail == PROCESS_ENDED
        if (outcome != "passed" and not ended_itself) or session.over.is_set():
            session.kill()
        rc = session.close()
        duration = time.monotonic() - start
        sig = _signal_of(rc)
        if session.over.is_set():
            outcome, detail = "output_limit", f"printed more than {limits.output_kb} KiB (killed)"
        elif ended_itself and sig in (signal.SIGXCPU, signal.SIGKILL):
            outcome, detail = "timeout", f"killed by {signal.Signals(sig).name} (CPU limit {limits.cpu_s}s)"
        elif ended_itself:
            detail = f"the process exited before the tests finished (early exit, exit status {rc})"
        return SandboxResult(outcome, detail, rc, duration, _tail(session.out.text()), _tail(session.err.text()),
                             session.isolation)


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]
