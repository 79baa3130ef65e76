"""One sandbox process seen from the judge: its pipes, its output caps, its CPU time, its end.

``sandbox.run_candidate`` starts one :class:`Session` per candidate. The CPU time a
verdict of ``timeout`` rests on is read from the kernel (the CPU clock RLIMIT_CPU
is checked against and ``/proc/<pid>`` of the sandbox's processes while they live,
the ``wait4`` resource usage of the sandbox once it has ended), never from what the
sandbox says: the candidate runs in that process and can raise or print anything,
exit with any status.
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
import threading
import time
from pathlib import Path
from typing import Any

from repro_py.codeeval import isolation as iso

CHILD_SOURCE = Path(__file__).with_name("sandbox_child.py")
MAX_REPLY = 16 * 1024 * 1024
PROCESS_ENDED = "the sandbox's process ended"
_TICK = os.sysconf("SC_CLK_TCK")
_CPUCLOCK_PROF = 0  # linux/posix-timers.h: the clock RLIMIT_CPU is checked against


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Limits of one sandbox as a whole: it is one task (seccomp), so the address space is its memory."""

    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 512
    file_size_mb: int = 16  # largest file it may write (and the size of its /sandbox tmpfs)
    nofile: int = 64
    output_kb: int = 1024  # stdout + stderr it may print before it is killed


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


class Session:
    """One sandbox process and the judge's side of its pipes."""

    def __init__(self, kind: str, limits: SandboxLimits, tmp: Path) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_s
        root = tmp / "root"
        root.mkdir()
        self.launch = iso.launch(kind, work_bytes=limits.file_size_mb << 20, root_dir=root)
        self.isolation = iso.describe(kind, self.launch.uid)
        self.cpu_at_end: float | None = None  # the kernel's count, from wait4, once it has ended
        self.cpu_seen = 0.0  # the most the kernel counted for its live processes while the judge waited
        self.charged_seen = 0.0  # the most RLIMIT_CPU's own count charged one of them while the judge waited
        self._pids: list[int] = []
        self._scanned = 0.0
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        config = {
            "req_fd": req_r, "resp_fd": resp_w, "jail": self.launch.jail,
            "drop_uid": self.launch.uid if kind == "none" else None, "no_files": kind == "none",
            "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb << 20,
                       "file_bytes": limits.file_size_mb << 20, "nofile": limits.nofile},
        }
        python, _ = iso.interpreter(kind)
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
            self.cpu_seconds()
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

    def cpu_seconds(self, *, rescan: bool = False) -> float:
        """CPU time the kernel counts for the sandbox's live processes now (also kept in ``cpu_seen``). The
        process list is rescanned once a second (the sandbox cannot add a task after it starts)."""
        now = time.monotonic()
        if rescan or now - self._scanned > 1.0:
            self._pids, self._scanned = process_tree(self.proc.pid), now
        cpu = sum(_cpu_of(pid) for pid in self._pids)
        self.cpu_seen = max(self.cpu_seen, cpu)
        self.charged_seen = max(self.charged_seen, self._charged())
        return cpu

    def charged_now(self) -> float:
        """The most CPU time RLIMIT_CPU's own count charges any of the sandbox's live processes now (see
        :func:`charged_cpu`; the limit is per process), rescanning the process list; also kept in ``charged_seen``."""
        self._pids, self._scanned = process_tree(self.proc.pid), time.monotonic()
        charged = self._charged()
        self.charged_seen = max(self.charged_seen, charged)
        return charged

    def _charged(self) -> float:
        return max((charged_cpu(pid) for pid in self._pids), default=0.0)

    def cpu_used(self) -> float:
        """The CPU time of the whole run: the kernel's count at the end (wait4: the launcher and the processes
        it reaped) or the most seen while it ran, whichever is larger (bwrap's launcher reaps not all)."""
        return max(self.cpu_seen, self.cpu_at_end or 0.0)

    def finish(self) -> None:
        """Tell the sandbox to exit (the tests are done)."""
        with contextlib.suppress(OSError):
            os.write(self.req_w, b'{"op": "exit"}\n')

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in process_tree(self.proc.pid):  # the candidate is in a session of its own under bwrap
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.kill_uid()

    def kill_uid(self) -> None:
        """Everything still running as the sandbox's own uid (none can fork; this is the second wall)."""
        uid = self.launch.uid
        if uid is None:
            return
        for _ in range(20):
            pids = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and uid_of(e) == uid]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def _reap(self, timeout_s: float) -> bool:
        """Wait for the sandbox to end (with the kernel's count of its CPU time); False if it has not."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: no usage figure
                return True
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.cpu_at_end = usage.ru_utime + usage.ru_stime  # its own and its waited-for descendants'
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def close(self) -> int | None:
        with contextlib.suppress(OSError):
            os.close(self.req_w)
        if not self._reap(max(0.5, min(5.0, self.deadline - time.monotonic()))):
            self.kill()
            self._reap(10.0)
        self.kill_uid()
        with contextlib.suppress(OSError):
            os.close(self.resp_r)
        return self.proc.returncode


def uid_of(entry: Path) -> int | None:
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


def charged_cpu(pid: int) -> float:
    """The CPU time the kernel checks ``pid``'s RLIMIT_CPU against (its SIGXCPU and SIGKILL come from this count),
    0.0 once it is gone.

    That is the process's CPUCLOCK_PROF clock: user + system time as the scheduler tick charges it. ``/proc``,
    ``schedstat`` and ``wait4`` report the runtime scaled to the exact scheduler count instead, which on a loaded
    machine trails the tick's charge (0.80 s read at a 1 s limit's SIGXCPU), so they cannot say whether the limit
    was really reached."""
    try:
        return time.clock_gettime((~pid << 3) | _CPUCLOCK_PROF)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_PROF)
    except OSError:  # gone (EINVAL)
        return 0.0


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (which may hold spaces), or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def process_tree(root: int) -> list[int]:
    """``root`` and every live descendant of it (host pids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and len(fields) > 1:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _cpu_of(pid: int) -> float:
    """The CPU time of ``pid``: the scheduler's exact count (schedstat, ns), else utime + stime in ticks."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 13:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14 and 15 of stat)
