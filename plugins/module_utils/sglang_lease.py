"""The host lease: one sweep or deploy at a time on a host (stdlib only).

A lease is a JSON file naming its holder: the lease id, the kind of run
(``sweep <run id>`` or ``deploy``), the user, the controller's host name and
boot id, the controller process (PID, its start time from /proc/<pid>/stat
field 22, its command line), the host's boot id when it was taken and since
when (UTC). Every decision is made under an exclusive ``flock`` on
``<lease>.lock`` and a new lease is written to a temporary file and renamed
over the old one, so two runs can never both win, and a reader never sees half
a lease.

There is no timer: a lease is held until its holder gives it back, however
old. It changes hands only when

* the host rebooted since it was taken (its boot id differs): the holder is gone;
* the operator asks for it (``takeover``);
* the caller found the holder's controller process gone (same controller, same
  boot, PID dead or reused) and asks for it by id (``takeover_if``): a
  compare-and-swap, so it is taken over only if that very lease is still there.

Whether a holder is alive is checked on the controller (:func:`alive`), never
on the host: the host cannot see the controller's processes.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import pwd
import socket
from pathlib import Path

BOOT_ID = "/proc/sys/kernel/random/boot_id"
PLAYBOOK_TAKEOVER = "-e sglang_service_lease_takeover=true"
SWEEP_TAKEOVER = "--take-over-lease"
#: Verdicts of :func:`decide`.
FREE, HELD, TAKE_OVER, REFUSE = "free", "held", "take_over", "refuse"


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def boot_id(path: str = BOOT_ID) -> str:
    return (read_text(path) or "").strip()


def pid_start_time(pid: int, proc: str = "/proc") -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): with the PID, names one process for the boot."""
    stat = read_text(f"{proc}/{int(pid)}/stat")
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # field 3 onwards (the command name may hold spaces)
    try:
        return int(fields[22 - 3])
    except (IndexError, ValueError):
        return None


def parent_pid(pid: int, proc: str = "/proc") -> int | None:
    stat = read_text(f"{proc}/{int(pid)}/stat")
    if not stat or ")" not in stat:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def cmdline(pid: int, proc: str = "/proc") -> str:
    return (read_text(f"{proc}/{int(pid)}/cmdline") or "").replace("\0", " ").strip()


def alive(pid: object, start_time: object, proc: str = "/proc") -> bool:
    """Whether process ``pid`` still runs and is the same process (same start time, not a reused PID)."""
    if not isinstance(pid, int) or not isinstance(start_time, int):
        return True  # unknown: never assume a holder is gone
    return pid_start_time(pid, proc) == start_time


def playbook_process(pid: int, proc: str = "/proc") -> int | None:
    """The top-level ansible-playbook process above ``pid`` (its forked workers share its command line,
    so the topmost one is the run itself), or None when there is none."""
    found = None
    seen: set[int] = set()
    current: int | None = pid
    while current and current > 1 and current not in seen:
        seen.add(current)
        if "ansible-playbook" in cmdline(current, proc):
            found = current
        current = parent_pid(current, proc)
    return found


def process_identity(pid: int | None, proc: str = "/proc") -> dict:
    """Who a controller process is: host, boot, PID and start time, user, command line."""
    user = None
    if pid is not None:
        try:
            user = pwd.getpwuid(Path(f"{proc}/{int(pid)}").stat().st_uid).pw_name
        except (OSError, KeyError):
            user = None
    return {
        "controller_host": socket.gethostname(),
        "controller_boot_id": boot_id(),
        "pid": pid,
        "pid_start_time": None if pid is None else pid_start_time(pid, proc),
        "user": user,
        "command": "" if pid is None else cmdline(pid, proc)[:500],
    }


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def decide(current: dict | None, lease_id: str, host_boot: str, takeover: bool, takeover_if: str) -> tuple[str, str]:
    """What an acquire by ``lease_id`` does to ``current`` (None: no lease): a verdict and why."""
    if current is None:
        return FREE, "no lease held"
    held_by = current.get("lease_id")
    if held_by == lease_id:
        return HELD, "already held by this lease"
    if current.get("host_boot_id") and host_boot and current["host_boot_id"] != host_boot:
        was = current["host_boot_id"]
        return TAKE_OVER, f"the host rebooted since the lease was taken (boot id {was}, now {host_boot})"
    if takeover:
        return TAKE_OVER, "taken over on request"
    if takeover_if and held_by == takeover_if:
        return TAKE_OVER, "its holder's process is gone (same controller and boot, PID dead)"
    return REFUSE, "held by another run"


def describe(lease: dict) -> str:
    if "unreadable" in lease:
        return f"an unreadable lease ({lease['unreadable']})"
    return (
        f"{lease.get('holder') or '?'} (lease {lease.get('lease_id') or '?'}) of "
        f"{lease.get('user') or '?'}@{lease.get('controller_host') or '?'}, "
        f"controller PID {lease.get('pid') or '?'}, since {lease.get('since') or '?'}"
        + (f": {lease['command']}" if lease.get("command") else "")
    )


def refusal(current: dict, path: str) -> str:
    return (
        f"the host is leased to {describe(current)} ({path}); nothing was changed. If that run is gone, take the "
        f"lease over: ansible-playbook ... {PLAYBOOK_TAKEOVER}, or python -m repro_py.sweep ... {SWEEP_TAKEOVER}"
    )


@contextlib.contextmanager
def flocked(path: Path):
    """Hold an exclusive flock on ``<path>.lock`` (created if missing; never removed, so never raced)."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def read(path: Path) -> dict | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"unreadable": str(exc)}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return {"unreadable": f"not JSON: {exc}"}
    return doc if isinstance(doc, dict) else {"unreadable": "not a JSON object"}


def write(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    tmp.chmod(0o644)
    tmp.replace(path)


def new_lease(lease_id: str, holder: str, who: dict, host_boot: str) -> dict:
    keys = ("user", "controller_host", "controller_boot_id", "pid", "pid_start_time", "command")
    return {"lease_id": lease_id, "holder": holder, **{k: who.get(k) for k in keys}, "host_boot_id": host_boot,
            "since": now_utc()}  # fmt: skip


def acquire(
    path: Path,
    lease_id: str,
    holder: str,
    who: dict,
    *,
    takeover: bool = False,
    takeover_if: str = "",
    host_boot: str | None = None,
    check: bool = False,
) -> dict:
    """Take the lease (or find it already ours); refused: ``acquired`` False with the message."""
    host_boot = boot_id() if host_boot is None else host_boot
    with contextlib.nullcontext() if check else flocked(path):
        current = read(path)
        verdict, why = decide(current, lease_id, host_boot, takeover, takeover_if)
        if verdict == REFUSE:
            if current is None:  # decide() refuses only a lease that is there
                raise ValueError(f"{path}: the lease was refused, but no lease is held")
            return {"acquired": False, "changed": False, "holder": current, "msg": refusal(current, str(path))}
        if verdict == HELD:
            return {"acquired": True, "changed": False, "lease": current, "msg": why}
        doc = new_lease(lease_id, holder, who, host_boot)
        if not check:
            write(path, doc)
        out = {"acquired": True, "changed": True, "lease": doc, "msg": why}
        if verdict == TAKE_OVER:
            out["took_over"] = current
            out["msg"] = f"took over the host lease from {describe(current or {})}: {why}"
        return out


def release(path: Path, lease_id: str, *, check: bool = False) -> dict:
    """Give the lease back if ``lease_id`` holds it; otherwise say who does (not an error)."""
    with contextlib.nullcontext() if check or not path.parent.is_dir() else flocked(path):
        current = read(path)
        if current is not None and current.get("lease_id") == lease_id:
            if not check:
                path.unlink()
            return {"released": True, "changed": True, "msg": f"released lease {lease_id}"}
        held = "no lease is held" if current is None else f"the lease is held by {describe(current)}"
        return {"released": False, "changed": False, "msg": f"lease {lease_id} is not held here ({held}); nothing done"}
