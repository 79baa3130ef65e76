"""How the coding sandbox is walled off, strongest first, and the command line that starts it.

``bwrap``        bubblewrap (Debian's ``bubblewrap`` package): new pid, network, ipc and uts
                 namespaces; a root of read-only binds (``/usr``, the interpreter's prefix)
                 with private tmpfs ``/sandbox`` (its only writable directory) and ``/tmp``;
                 no host environment. Started as root, bwrap runs in its privileged mode and
                 the candidate gets a fresh unprivileged uid through ``setpriv`` (no
                 capabilities, no new privileges); otherwise bwrap makes a user namespace.
``namespaces``   no bubblewrap: ``unshare`` makes the same namespaces and the child builds the
                 same root itself (``sandbox_child._jail``: binds, tmpfs, ``pivot_root``),
                 then drops to the fresh uid (as root) or every capability (user namespace).
``none``         neither works on this machine: resource limits only; the network and the file
                 system are the host's. The result says so; nothing claims more.

The uid a root-started sandbox gets is fresh per run (a random one far above any
account's), so ``RLIMIT_NPROC`` counts the sandbox's processes only.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

SANDBOX_DIR = "/sandbox"
UID_BASE = 2_000_000_000  # far above any account's uid
UID_SPAN = 100_000_000


@dataclasses.dataclass(frozen=True)
class Launch:
    argv: list[str]
    jail: dict[str, object] | None  # what the child builds itself (namespace fallback)
    uid: int | None  # the uid the candidate runs as (None: the caller's)
    root_dir: Path | None  # an empty host directory the jail mounts its root on


def interpreter() -> tuple[str, str]:
    """(the real interpreter binary, its prefix): the child needs neither a venv nor site packages."""
    exe = os.path.realpath(sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


def read_only_paths() -> list[str]:
    """What the candidate sees, read-only: /usr (libraries, setpriv), the merged-/usr links, the interpreter."""
    _, prefix = interpreter()
    paths = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32"]
    if not prefix.startswith("/usr/"):
        paths.append(prefix)
    return [p for p in paths if os.path.lexists(p)]


def fresh_uid() -> int | None:
    """A uid of the sandbox's own when running as root; None otherwise (the caller's uid is used)."""
    return UID_BASE + secrets.randbelow(UID_SPAN) if os.geteuid() == 0 else None


def _bwrap_argv(bwrap: str, work_bytes: int, uid: int | None) -> list[str]:
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    if uid is None:
        argv.append("--unshare-user")
    for path in read_only_paths():
        if Path(path).is_symlink():
            argv += ["--symlink", str(Path(path).readlink()), path]
        else:
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc",
             "--perms", "01777", "--size", str(work_bytes), "--tmpfs", SANDBOX_DIR,
             "--perms", "01777", "--size", str(1 << 20), "--tmpfs", "/tmp",
             "--chdir", SANDBOX_DIR, "--"]
    if uid is not None:
        argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs"]
    return argv


def _unshare_argv(unshare: str, uid: int | None) -> list[str]:
    flags = ["--mount", "--net", "--pid", "--fork", "--ipc", "--uts", "--kill-child"]
    if uid is None:
        flags = ["--user", "--map-root-user", *flags]
    return [unshare, *flags, "--"]


def launch(kind: str, *, work_bytes: int, root_dir: Path | None) -> Launch:
    """The command prefix (before ``python -I -S -c``) for isolation ``kind``."""
    uid = fresh_uid()
    if kind == "bwrap":
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise RuntimeError("bwrap is not installed")
        return Launch(_bwrap_argv(bwrap, work_bytes, uid), None, uid, None)
    if kind == "namespaces":
        unshare = shutil.which("unshare")
        if unshare is None or root_dir is None:
            raise RuntimeError("unshare is not installed")
        jail = {"root": str(root_dir), "binds": read_only_paths(), "work_bytes": work_bytes, "uid": uid}
        return Launch(_unshare_argv(unshare, uid), jail, uid, root_dir)
    if kind == "none":
        return Launch([], None, None, None)
    raise ValueError(f"isolation {kind!r}: allowed bwrap, namespaces, none")


def describe(kind: str, uid: int | str | None) -> str:
    """What isolation ``kind`` gives; ``uid`` is the candidate's (a number, a phrase, or None: the caller's)."""
    if uid is None:
        who = "the caller's uid in a user namespace, no capabilities"
    else:
        who = f"{uid if isinstance(uid, str) else f'uid {uid}'} without capabilities"
    if kind == "bwrap":
        return (f"{bwrap_version()}: read-only /usr and interpreter, private /sandbox and /tmp (tmpfs), no host "
                f"files, no network (new netns), new pid/ipc/uts namespaces, {who}; verdict by the judge process")
    if kind == "namespaces":
        return ("namespaces (unshare + pivot_root): read-only /usr and interpreter, private /sandbox and /tmp "
                f"(tmpfs), no host files, no network (new netns), new pid/ipc/uts namespaces, {who}; "
                "verdict by the judge process")
    return ("none: resource limits only (neither bubblewrap nor namespaces work here): the candidate sees the "
            "host's files and network; verdict by the judge process")


@functools.lru_cache(maxsize=1)
def bwrap_version() -> str:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (not installed)"
    proc = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False)
    return proc.stdout.strip() or "bubblewrap"
