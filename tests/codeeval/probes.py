"""Adversarial probes of the coding sandbox: candidate code that tries to fool the judge or escape.

Each probe is candidate code, the hidden tests the judge runs against it, and ``held``: whether the
judge and the host came out unharmed (the run's result, the host's state after it). They run through
``run_candidate`` only (its keyword arguments ``limits`` and ``isolation``), so the same table runs
against any version of the sandbox. ``tests/codeeval/test_probes.py`` asserts every probe held in
every mode that promises it; ``benchmarks/sandbox_probes.py`` prints the table per mode.

``in_none`` says what mode ``none`` (no private file system, no pid namespace) promises: ``always``,
``as_root`` (held through the fresh uid only a root-started judge gets), or ``never``: reading the
host's world-readable files and seeing its process list need a namespace, which ``none`` lacks; the
gates refuse ``none`` unless ``--allow-unisolated`` is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[2]
SECRET = "zq7-secret-4821"  # an expected value: in the judge's memory, never sent to the sandbox


@dataclasses.dataclass
class Context:
    """What a probe's code and check may use: the judge's pid, a loopback listener, host paths."""

    judge_pid: int
    port: int
    accepted: list[int]
    tmp: Path
    token: str

    @property
    def host_targets(self) -> list[Path]:
        return [self.tmp / "pwned", Path(f"/usr/pwned-{self.token}"), Path(f"/tmp/pwned-{self.token}"),
                REPO / f"pwned-{self.token}"]

    @property
    def private_file(self) -> Path:
        return self.tmp / "judge-private.txt"


def daemon_name(ctx: Context) -> str:
    return f"d{ctx.token}"[:15]  # a process name (comm) holds 15 characters


@dataclasses.dataclass(frozen=True)
class Probe:
    id: str
    what: str
    code: Callable[[Context], str]
    tests: Callable[[Context], str]
    held: Callable[[Any, Context], bool]
    limits: dict[str, float] = dataclasses.field(default_factory=lambda: {"timeout_s": 5.0, "cpu_s": 2,
                                                                           "memory_mb": 256})
    in_none: Literal["always", "as_root", "never"] = "always"
    new: bool = False  # one of the builtin-shadowing probes added with the judge's own namespace


def _daemon_pids(ctx: Context) -> list[int]:
    """Live processes named as this run's daemon names itself (nobody else's: the name holds the run's token)."""
    out: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == daemon_name(ctx) and "\nState:\tZ" not in (
                        entry / "status").read_text():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def kill_leftovers(ctx: Context) -> None:
    """Stop a daemon a probe left behind (only this run's, found by its name)."""
    for pid in _daemon_pids(ctx):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def loopback_listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP listener on the judge's loopback; yields its port and the list of connections it accepted."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(timeout=2)
        srv.close()


@contextlib.contextmanager
def probe_context(tmp: Path) -> Iterator[Context]:
    """The context a probe runs in (a listener, a judge-private file) and, after it, the host cleaned up."""
    with loopback_listener() as (port, accepted):
        ctx = Context(judge_pid=os.getpid(), port=port, accepted=accepted, tmp=tmp, token=secrets.token_hex(6))
        ctx.private_file.write_text("judge only\n")
        ctx.private_file.chmod(0o600)
        try:
            yield ctx
        finally:
            kill_leftovers(ctx)
            for path in ctx.host_targets:
                path.unlink(missing_ok=True)


def _not_passed(result: Any, ctx: Context) -> bool:
    return bool(result.outcome != "passed")


def _const(text: str) -> Callable[[Context], str]:
    return lambda ctx: text


_READ = (
    "def read(path):\n    try:\n        with open(path, 'rb') as fh:\n            fh.read(1)\n        return 'read'\n"
    "    except OSError as exc:\n        return type(exc).__name__\n"
)
_FORGED = [
    b'{"loaded": ["f"]}\n{"value": true, "args": []}\n{"value": true, "args": []}\n',
    b'{"passed": true}\n' * 3,
    b"all tests passed\n",
]
_JUDGE_MEMORY = r'''
import os, re

def _parent(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0

def steal():
    pattern = re.compile(rb"zq7-secret-[0-9]{4}")
    pid = os.getppid()
    for _ in range(3):  # the judge is the parent (or above the launcher)
        if pid <= 1:
            break
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            mem = open(f"/proc/{pid}/mem", "rb")
        except OSError:
            pid = _parent(pid)
            continue
        with mem:
            for line in maps:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if not parts[1].startswith("r") or (len(parts) > 5 and parts[5].startswith("/")):
                    continue
                for at in range(lo, hi, 8 << 20):
                    try:
                        mem.seek(at)
                        found = pattern.search(mem.read(min(8 << 20, hi - at)))
                    except (OSError, ValueError, OverflowError):
                        break
                    if found:
                        return found.group().decode()
        pid = _parent(pid)
    return None
'''
_MEMORY_PER_SANDBOX = '''
import os, select, time

def hold():
    r, w = os.pipe()
    for _ in range(4):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                blob = bytearray(400 << 20)
                os.write(w, b"1")
                time.sleep(3)
            finally:
                os._exit(0)
    os.close(w)
    got, deadline = 0, time.time() + 8
    while got < 4 and time.time() < deadline:
        ready, _, _ = select.select([r], [], [], 0.2)
        if ready:
            chunk = os.read(r, 16)
            if not chunk:
                break
            got += len(chunk)
    return got
'''
_FORK_COUNT = '''
import os, time

def forks():
    n = 0
    for _ in range(200):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    return n
'''
_DAEMON = '''
import ctypes, os, time

def spawn(name):
    try:
        pid = os.fork()
    except OSError as exc:
        return "refused: " + str(exc)
    if pid == 0:  # a daemon: its own session, no pipe of the judge's held open, a name the check knows
        os.setsid()
        ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(30)
        os._exit(0)
    return "spawned"
'''
_NETWORK = (
    "import socket\ndef connect(port):\n    try:\n        socket.create_connection(('127.0.0.1', port), "
    "timeout=2).close()\n        return 'connected'\n    except OSError as exc:\n        return type(exc).__name__\n"
)
_WRITE = (
    "import os\ndef write(path):\n    try:\n        with open(path, 'w') as fh:\n            fh.write('x')\n"
    "        return 'written'\n    except OSError as exc:\n        return type(exc).__name__\n"
)


def _held_listener(result: Any, ctx: Context) -> bool:
    return not ctx.accepted


def _held_no_host_file(result: Any, ctx: Context) -> bool:
    return not any(p.exists() for p in ctx.host_targets)


def _held_no_leftover(result: Any, ctx: Context) -> bool:
    """No process of this run's daemon (by the name it gave itself) is alive after the run."""
    time.sleep(0.5)
    return not _daemon_pids(ctx)


def _judge_cmdline(ctx: Context) -> str:
    return Path(f"/proc/{ctx.judge_pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


PROBES: list[Probe] = [
    Probe("token_and_early_exit", "read a harness token from __main__, print it, exit 0 against `assert False`",
          _const("import __main__, os, sys\nprint(getattr(__main__, 'token', ''))\nsys.stdout.flush()\nos._exit(0)\n"),
          _const("assert False\n"), _not_passed),
    *[Probe(f"forged_reply_{i}", f"write replies on the verdict pipe itself: {forged[:30]!r}",
            _const("import json, os, sys\ncfg = json.loads(sys.argv[1])\n"
                   f"os.write(cfg['resp_fd'], {forged!r})\ndef f(x):\n    return 0\n"),
            _const("assert f(1) == 17\nassert f(2) == 29\n"),
            lambda r, ctx: r.outcome in ("assertion_failed", "exception")) for i, forged in enumerate(_FORGED, 1)],
    Probe("expected_value_never_sent", "print everything the sandbox receives: the expected value is not in it",
          _const("import sys\ndef f(x):\n    print(sys.argv, flush=True)\n    return x\n"),
          _const("assert f(1) == 987654321\n"),
          lambda r, ctx: r.outcome == "assertion_failed" and "987654321" not in r.stdout_tail + r.stderr_tail),
    Probe("patched_builtins_in_sandbox", "patch AssertionError, isinstance and len in the sandbox's own process",
          _const("import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})\n"
                 "builtins.isinstance = lambda *a: True\nbuiltins.len = lambda *a: 3\ndef f(x):\n    return [0]\n"),
          _const("assert f(1) == [1, 2, 3]\nassert len(f(1)) == 3\n"), _not_passed),
    Probe("always_equal_object", "return an object whose __eq__ always agrees",
          _const("class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()\n"),
          _const("assert f(1) == 2\n"), lambda r, ctx: r.outcome == "exception" and "not plain data" in r.detail),
    Probe("early_exit_during_a_test", "exit 0 in the middle of a test",
          _const("import os\ndef f(x):\n    os._exit(0)\n"),
          _const("assert f(1) == 2\n"), _not_passed),
    Probe("deep_nesting", "return a value nested 1000 deep", _const(
        "def f(x):\n    v = []\n    for _ in range(1000):\n        v = [v]\n    return v\n"),
          _const("assert f(1) == 1\n"), lambda r, ctx: r.outcome == "exception"),
    Probe("oversized_reply", "return 20 MiB", _const("def f(x):\n    return 'x' * (20 << 20)\n"),
          _const("assert f(1) == 'x'\n"), lambda r, ctx: r.outcome == "exception",
          limits={"timeout_s": 10.0, "cpu_s": 5, "memory_mb": 512}),
    Probe("cpu_burn", "spin: a timeout, from the kernel's CPU count",
          _const("def f(x):\n    while True:\n        pass\n"),
          _const("assert f(1) == 1\n"), lambda r, ctx: r.outcome == "timeout",
          limits={"timeout_s": 15.0, "cpu_s": 1, "memory_mb": 256}),
    Probe("wall_sleep", "sleep past the wall limit", _const("import time\ndef f(x):\n    time.sleep(30)\n"),
          _const("assert f(1) == 1\n"), lambda r, ctx: r.outcome == "timeout" and r.duration_s < 5,
          limits={"timeout_s": 1.0, "cpu_s": 5, "memory_mb": 256}),
    Probe("memory_bomb", "allocate 1 GiB in one process", _const("blob = bytearray(1 << 30)\n"), _const(""),
          lambda r, ctx: r.outcome == "exception" and "MemoryError" in r.detail),
    Probe("huge_output", "print without end", _const("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"),
          _const(""), lambda r, ctx: r.outcome == "output_limit" and len(r.stdout_tail) <= 2003,
          limits={"timeout_s": 10.0, "cpu_s": 5, "memory_mb": 256, "output_kb": 256}),
    Probe("cpu_limit_name", "raise its own exception class named CPULimitExceeded",
          _const("class CPULimitExceeded(Exception):\n    pass\ndef f(x):\n    raise CPULimitExceeded('spoof')\n"),
          _const("assert f(1) == 1\n"), lambda r, ctx: r.outcome == "exception"),
    Probe("exit_status_of_a_signal", "exit with status 152 (what bwrap reports for SIGXCPU)",
          _const("import os\ndef f(x):\n    os._exit(152)\n"), _const("assert f(1) == 1\n"),
          lambda r, ctx: r.outcome == "exception"),
    Probe("environment", "look for the judge's environment",
          _const("import os\ndef env():\n    return sorted(os.environ)\n"),
          _const("assert any('REPRO_JUDGE_SECRET' in e for e in env())\n"), _not_passed),
    Probe("root", "become root (or stay root)", _const(
        "import os\ndef whoami():\n    for fn in (lambda: os.setgid(0), lambda: os.setuid(0)):\n        try:\n"
        "            fn()\n        except OSError:\n            pass\n    return os.geteuid()\n"),
          _const("assert whoami() == 0\n"), _not_passed),
    Probe("host_writes", "write files on the host (its tmp, /usr, /tmp, the project)", _const(_WRITE),
          lambda ctx: "".join(f"write({str(p)!r})\n" for p in ctx.host_targets), _held_no_host_file),
    Probe("read_project", "read the hidden tests' file (problems.yaml) and the Makefile", _const(_READ),
          _const(f"assert read({str(REPO / 'repro_py/codeeval/problems.yaml')!r}) == 'read'\n"
                 f"assert read({str(REPO / 'Makefile')!r}) == 'read'\n"), _not_passed, in_none="never"),
    Probe("read_judge_private", "read a file only the judge's uid may read", _const(_READ),
          lambda ctx: f"assert read({str(ctx.private_file)!r}) == 'read'\n", _not_passed, in_none="as_root"),
    Probe("process_list", "see the judge in the process list",
          _const("import os\ndef cmdlines():\n    out = []\n    for p in os.listdir('/proc'):\n"
                 "        if p.isdigit():\n            try:\n"
                 "                raw = open(f'/proc/{p}/cmdline', 'rb').read()\n"
                 "                out.append(raw.replace(b'\\0', b' ').decode().strip())\n"
                 "            except (OSError, UnicodeDecodeError):\n                pass\n    return out\n"),
          lambda ctx: f"assert {_judge_cmdline(ctx)!r} in cmdlines()\n", _not_passed, in_none="never"),
    Probe("judge_memory", "read an expected value from the judge's memory (/proc/<ppid>/mem)", _const(_JUDGE_MEMORY),
          _const(f"assert steal() == {SECRET!r}\n"), _not_passed,
          limits={"timeout_s": 30.0, "cpu_s": 20, "memory_mb": 512}, in_none="as_root"),
    Probe("ptrace_judge", "ptrace the judge (PTRACE_SEIZE of the parent)", _const(
        "import ctypes, os\ndef attach():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
        "    rc = libc.ptrace(ctypes.c_long(0x4206), ctypes.c_long(os.getppid()), None, None)\n"
        "    return 'attached' if rc == 0 else os.strerror(ctypes.get_errno())\n"),
          _const("assert attach() == 'attached'\n"), _not_passed),
    Probe("signal_judge", "signal the judge (kill(ppid, 0): permission to signal it)", _const(
        "import os\ndef poke():\n    if os.getppid() <= 1:\n        return 'no parent in sight'\n    try:\n"
        "        os.kill(os.getppid(), 0)\n        return 'may signal'\n"
        "    except OSError as exc:\n        return exc.strerror\n"),
          _const("assert poke() == 'may signal'\n"), _not_passed),
    Probe("network", "connect to a loopback listener of the host", _const(_NETWORK),
          lambda ctx: f"connect({ctx.port})\n", _held_listener),
    Probe("fork_count", "fork up to 200 processes (the old limit was 32)", _const(_FORK_COUNT),
          _const("n = forks()\nassert n >= 32, n\n"), _not_passed,
          limits={"timeout_s": 15.0, "cpu_s": 5, "memory_mb": 256}),
    Probe("setsid_daemon", "leave a daemon running (fork, setsid) after the run", _const(_DAEMON),
          lambda ctx: f"spawn({daemon_name(ctx)!r})\n", _held_no_leftover),
    Probe("memory_per_sandbox", "hold 4 x 400 MiB in one sandbox of 512 MiB (4 processes)", _const(_MEMORY_PER_SANDBOX),
          _const("assert hold() >= 2\n"), _not_passed, limits={"timeout_s": 20.0, "cpu_s": 10, "memory_mb": 512}),
    Probe("shadow_sorted", "define sorted() returning []", _const(
        "def f(x):\n    return [0]\ndef sorted(x, **kw):\n    return []\n"),
          _const("assert sorted(f(1)) == sorted([3, 1, 2])\n"), _not_passed, new=True),
    Probe("shadow_abs", "define abs() returning 0", _const("def f(x):\n    return 99\ndef abs(x):\n    return 0\n"),
          _const("assert abs(f(2) - 0.333) < 1e-3\n"), _not_passed, new=True),
    Probe("shadow_len", "define len() returning 3", _const("def f(x):\n    return []\ndef len(x):\n    return 3\n"),
          _const("assert len(f(3)) == 3\n"), _not_passed, new=True),
    Probe("shadow_set", "define set() returning 0", _const("def f(x):\n    return [1]\ndef set(*a):\n    return 0\n"),
          _const("assert set(f(1)) == set([1, 2])\n"), _not_passed, new=True),
]


def promised(probe: Probe, mode: str) -> bool:
    """Whether ``mode`` promises to hold ``probe`` (on this machine, as this user)."""
    if mode != "none" or probe.in_none == "always":
        return True
    return probe.in_none == "as_root" and os.geteuid() == 0
