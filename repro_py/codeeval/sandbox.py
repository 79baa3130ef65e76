"""Run candidate code against hidden tests so that nothing inside can fake the verdict.

Two processes. The candidate's code runs in the sandbox (``sandbox_child``:
an isolated interpreter in the strongest isolation this machine offers, see
``isolation``), one task under resource limits (CPU seconds, address space,
file size, open files, no core dumps; seccomp refuses fork and threads, so
the limits are those of the sandbox as a whole), with a wall-clock limit and
a cap on what it may print. The hidden tests run HERE, in the judge, which
the candidate cannot reach: each test's calls of the candidate's functions go
over a pipe as plain data (``sandbox_child`` explains the encoding) and come
back as plain data, and the asserts compare them in this process. The tests
see the entry point(s) they call and the real builtins, nothing else the
candidate defined: a candidate's ``sorted`` or ``len`` never replaces the
judge's. There is no token to steal and no "passed" message to forge: the
verdict is whatever the judge's own asserts say. An early exit, a crash, a
forged or malformed reply, an unencodable result (say, an object whose
``__eq__`` always agrees) is never a pass, and a ``timeout`` rests on the CPU
time the kernel counted, never on what the sandbox said.

Outcomes: ``passed``, ``assertion_failed`` (a hidden test's assert),
``exception`` (the candidate raised, failed to load, exited early, broke the
protocol), ``timeout`` (wall or CPU limit), ``output_limit`` (printed more
than allowed; killed).

Judging needs an isolating mode (bubblewrap or namespaces):
``require_isolation`` refuses, naming what is missing and how to get it,
unless the caller allows the unisolated mode ``none``.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import signal
import tempfile
import time
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from repro_py.codeeval import isolation as iso
from repro_py.codeeval.sandbox_child import decode, encode
from repro_py.codeeval.sandbox_session import PROCESS_ENDED, SandboxGone, SandboxLimits, Session

__all__ = [
    "ISOLATIONS", "CandidateRaised", "IsolationCheck", "IsolationUnavailable", "SandboxGone", "SandboxLimits",
    "SandboxResult", "available_isolation", "check_isolation", "isolation_in_force", "require_isolation",
    "run_candidate",
]

Outcome = Literal["passed", "assertion_failed", "exception", "timeout", "output_limit"]
ISOLATIONS = ("bwrap", "namespaces", "none")
ISOLATING = ("bwrap", "namespaces")
BUILTIN_NAMES = frozenset(dir(builtins))
# The sandbox's "CPU limit reached" (its SIGXCPU handler) is believed when RLIMIT_CPU's own count (the process's
# CPUCLOCK_PROF clock, read while it lives) has reached the limit; a candidate that raises the sandbox's exception
# itself is judged an exception, one that ran into the limit a timeout: either way it fails. A sandbox that has
# ended is judged by the most that count was seen at, or else by the exact CPU time wait4 and /proc report, which
# trails the tick-charged count on a loaded machine (0.80 s at a 1 s limit's SIGXCPU): from this share of the limit.
CPU_BELIEVED_SHARE = 0.8


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


class IsolationUnavailable(RuntimeError):
    """No isolating sandbox works here and the unisolated mode was not allowed."""


@dataclasses.dataclass(frozen=True)
class IsolationCheck:
    """The strongest mode that works here, and why each stronger one does not."""

    mode: str
    failures: dict[str, str]

    def refusal(self) -> str:
        missing = "; ".join(f"{kind}: {why} ({iso.hint(kind, why)})" for kind, why in self.failures.items()
                            if kind in ISOLATING)
        return (
            "refusing to judge candidate code: no isolating sandbox works on this machine. " + missing + ". "
            "--allow-unisolated judges anyway in mode none (the candidate then reads the host's files and sees "
            "its processes)"
        )


def _proxy(session: Session, name: str) -> Any:
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


def _names_used(code: types.CodeType) -> set[str]:
    """Every global name the code (and the functions, lambdas and comprehensions in it) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_used(const)
    return names


def entry_points_for(tests: types.CodeType, loaded: Iterable[object], wanted: Sequence[str] | None) -> list[str]:
    """The candidate's names the tests may call: ``wanted`` (a problem's entry point), else the names the tests
    use that the candidate defined; never a builtin's name and never a dunder."""
    defined = {n for n in loaded if isinstance(n, str) and n.isidentifier()}
    names = set(wanted) if wanted is not None else _names_used(tests)
    return sorted(n for n in names & defined if n not in BUILTIN_NAMES and not n.startswith("__"))


def check_entry_points(names: Sequence[str]) -> None:
    bad = [n for n in names if not n.isidentifier() or n in BUILTIN_NAMES or n.startswith("__")]
    if bad:
        raise ValueError(f"entry points {bad}: an entry point is an identifier that is not a builtin's name")


@functools.lru_cache(maxsize=1)
def check_isolation() -> IsolationCheck:
    """Probe each mode, strongest first, with a trivial candidate (once per process)."""
    failures: dict[str, str] = {}
    for kind in ISOLATIONS:
        try:
            result = run_candidate("def ok():\n    return 1\n", "assert ok() == 1\n", isolation=kind,
                                   limits=SandboxLimits(timeout_s=20.0))
        except (RuntimeError, OSError) as exc:
            failures[kind] = str(exc)
            continue
        if result.outcome == "passed":
            return IsolationCheck(kind, failures)
        failures[kind] = result.stderr_tail.strip()[-300:] or result.detail  # the launcher's own words first
    return IsolationCheck("unavailable", failures)


def available_isolation() -> str:
    """The strongest isolation that works on this machine (``unavailable``: not even mode none starts)."""
    return check_isolation().mode


def require_isolation(*, allow_unisolated: bool) -> str:
    """The mode candidates are judged in; raises ``IsolationUnavailable`` when that would be ``none`` and the
    caller did not allow it, or when no sandbox starts at all."""
    check = check_isolation()
    if check.mode in ISOLATING or (check.mode == "none" and allow_unisolated):
        return check.mode
    if check.mode == "none":
        raise IsolationUnavailable(check.refusal())
    raise IsolationUnavailable(
        "the coding sandbox cannot start on this machine in any mode: "
        + "; ".join(f"{kind}: {why}" for kind, why in check.failures.items())
    )


def isolation_in_force(kind: str | None = None) -> str:
    """The description recorded with every verdict of this machine's sandbox (``kind``: the mode used)."""
    kind = kind or available_isolation()
    return iso.describe(kind, "a fresh uid per run" if iso.fresh_uid() is not None else None)


def _signal_of(rc: int | None) -> int | None:
    if rc is None:
        return None
    if rc < 0:
        return -rc
    return rc - 128 if rc > 128 else None  # bwrap and unshare report a killed child as 128 + signal


def _cpu_timeout(cpu: float | None, limits: SandboxLimits) -> bool:
    return cpu is not None and cpu >= limits.cpu_s * CPU_BELIEVED_SHARE


def _load(session: Session, code: str) -> list[object]:
    loaded = session.request({"op": "load", "code": code})
    if set(loaded) == {"raised"}:
        raise CandidateRaised(str(loaded["raised"].get("type")), str(loaded["raised"].get("message")))
    names = loaded.get("loaded")
    if set(loaded) != {"loaded"} or not isinstance(names, list):
        raise SandboxGone(f"the sandbox answered out of protocol: {str(loaded)[:200]}")
    return names


def run_candidate(
    code: str, tests: str, *, limits: SandboxLimits | None = None, isolation: str | None = None,
    entry_points: Sequence[str] | None = None,
) -> SandboxResult:
    """Load ``code`` in the sandbox and run ``tests`` (asserts) here against it; say how it went.

    ``entry_points``: the candidate's names the tests may call (default: those the tests use)."""
    limits = limits or SandboxLimits()
    kind = isolation or available_isolation()
    if kind not in ISOLATIONS:
        raise ValueError(f"isolation={kind!r}: allowed {', '.join(ISOLATIONS)}")
    if entry_points is not None:
        check_entry_points(entry_points)
    compiled = compile(tests, "tests.py", "exec")  # the project's own hidden tests
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="codeeval-") as tmp:
        session = Session(kind, limits, Path(tmp))
        outcome: Outcome = "passed"
        detail = "all tests passed"
        try:
            names = _load(session, code)
            scope = {n: _proxy(session, n) for n in entry_points_for(compiled, names, entry_points)}
            exec(compiled, {"__name__": "__tests__", "__builtins__": builtins, **scope})  # run here, in the judge
            session.finish()
        except AssertionError as exc:
            outcome, detail = "assertion_failed", f"AssertionError: {exc}".rstrip(": ")
        except CandidateRaised as exc:
            outcome, detail = "exception", str(exc)
            if exc.kind == "CPULimitExceeded":  # said by the sandbox: believed only if the kernel's count agrees
                charged = session.charged_now()
                if charged >= limits.cpu_s:
                    outcome, detail = "timeout", f"CPU limit {limits.cpu_s}s exceeded ({charged:.2f}s charged)"
                else:
                    detail += (f" (the candidate's own: the kernel charged {charged:.2f}s of CPU, "
                               f"the limit is {limits.cpu_s}s)")
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
        elif ended_itself and (session.charged_seen >= limits.cpu_s or _cpu_timeout(session.cpu_used(), limits)):
            killed = sig in (signal.SIGXCPU, signal.SIGKILL)
            how = f"killed by {signal.Signals(sig).name}" if killed and sig else f"ended (exit status {rc})"
            outcome, detail = "timeout", f"{how} at the CPU limit {limits.cpu_s}s ({session.cpu_used():.2f}s used)"
        elif ended_itself:
            detail = f"the process exited before the tests finished (early exit, exit status {rc})"
        return SandboxResult(outcome, detail, rc, duration, _tail(session.out.text()), _tail(session.err.text()),
                             session.isolation)


def _tail(text: str, n: int = 2000) -> str:
    return text if len(text) <= n else "..." + text[-n:]
