"""How the coding sandbox is walled off, strongest first, and the command line that starts it.

``bwrap``        bubblewrap (Debian's ``bubblewrap`` package): new pid, network, ipc and uts
                 namespaces; a root of read-only binds (``/usr``, the interpreter's prefix)
                 with private tmpfs ``/sandbox`` (its only writable directory) and ``/tmp``;
                 no host environment. Started as root, bwrap runs in its privileged mode and
                 the candidate gets a fresh unprivileged uid through ``setpriv`` (no
                 capabilities, no new privileges); otherwise bwrap makes a user namespace.
``namespaces``   no bubblewrap: ``unshare`` makes the same namespaces and the child builds the
                 same root itself (``sandbox_child._jail``: binds, tmpfs, ``pivot_root``),
                 then drops to the fresh uid (as root) or every capability (a user namespace
                 that maps the caller's own uid, never root).
``none``         neither works on this machine: no private file system or network namespace.
                 The gates refuse to judge in this mode unless ``--allow-unisolated`` is given
                 (``sandbox.require_isolation``); the result says which mode judged.

In every mode the candidate runs as a uid that is not root (as root: a fresh uid per run,
a random one far above any account's; otherwise the caller's own) and, before its first
line, under the walls of ``sandbox_child._walls``: resource limits and a seccomp filter
under which its process is the sandbox's only task, so the address-space limit is the
memory of the whole sandbox (with its tmpfs directories, whose sizes are capped).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
import stat
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


def interpreter(kind: str = "bwrap") -> tuple[str, str]:
    """(the real interpreter binary, its prefix): the child needs neither a venv nor site packages.

    Mode ``none`` started as root runs it as a fresh uid on the host's file system: when this
    interpreter's standard library is not open to other users (say, a pyenv under /root), a system
    interpreter of the same version is used instead, or the mode is refused (RuntimeError)."""
    exe, prefix = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
    if kind != "none" or os.geteuid() != 0 or _open_to_others(_stdlib(prefix)):
        return exe, prefix
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        real = Path(candidate).resolve()
        other_prefix = str(real.parent.parent)
        if os.access(real, os.X_OK) and _open_to_others(_stdlib(other_prefix)):
            return str(real), other_prefix
    raise RuntimeError(
        f"mode none: the standard library at {_stdlib(prefix)} is not open to other users, so the sandbox's fresh "
        f"uid could not import it, and no {version} with an open one is installed in /usr/bin or /usr/local/bin"
    )


def _stdlib(prefix: str) -> str:
    return str(Path(prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}")


def _open_to_others(path: str) -> bool:
    """Whether a user with no group in common can read ``path`` (every directory above it searchable)."""
    here = Path(path)
    try:
        if not here.stat().st_mode & stat.S_IROTH:
            return False
        return all(p.stat().st_mode & stat.S_IXOTH for p in (here, *here.parents))
    except OSError:
        return False


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


#: How to get what a mode needs (named in the refusal when no isolating mode works).
INSTALL_HINTS = {
    "bwrap": "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; `make system-packages`)",
    "namespaces": "install util-linux (unshare, setpriv)",
}
USERNS_HINT = (
    "as a user other than root it needs unprivileged user namespaces (Ubuntu 24.04: sysctl "
    "kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile allowing userns for bwrap; elsewhere "
    "user.max_user_namespaces > 0 and, on Debian kernels, kernel.unprivileged_userns_clone=1), or run the gates as root"
)


def hint(kind: str, why: str) -> str:
    """What to do about mode ``kind`` failing with ``why``: install the tool, or allow what it needs."""
    return INSTALL_HINTS[kind] if "not installed" in why else USERNS_HINT


def find_tool(name: str) -> str | None:
    """The path of ``name`` on PATH (the one seam the tests use to take bwrap or unshare away)."""
    return shutil.which(name)


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
    if uid is None:  # the caller's own uid inside (never root), with the namespace's capabilities to build the jail
        flags = ["--user", "--map-current-user", "--keep-caps", *flags]
    return [unshare, *flags, "--"]


def launch(kind: str, *, work_bytes: int, root_dir: Path | None) -> Launch:
    """The command prefix (before ``python -I -S -c``) for isolation ``kind``."""
    uid = fresh_uid()
    if kind == "bwrap":
        bwrap = find_tool("bwrap")
        if bwrap is None:
            raise RuntimeError("bubblewrap is not installed (no bwrap on PATH)")
        return Launch(_bwrap_argv(bwrap, work_bytes, uid), None, uid, None)
    if kind == "namespaces":
        unshare = find_tool("unshare")
        if unshare is None or root_dir is None:
            raise RuntimeError("unshare is not installed (no unshare on PATH)")
        jail = {"root": str(root_dir), "binds": read_only_paths(), "work_bytes": work_bytes, "uid": uid}
        return Launch(_unshare_argv(unshare, uid), jail, uid, root_dir)
    if kind == "none":  # the child drops to the fresh uid itself (sandbox_child._drop_to)
        return Launch([], None, uid, None)
    raise ValueError(f"isolation {kind!r}: allowed bwrap, namespaces, none")


WALLS = ("one task (seccomp refuses fork and threads), address space, CPU, file size and open-file limits, "
         "no sockets, signals, ptrace or mounts")


def describe(kind: str, uid: int | str | None) -> str:
    """What isolation ``kind`` gives; ``uid`` is the candidate's (a number, a phrase, or None: the caller's)."""
    if uid is None:
        who = "the caller's uid" + (" in a user namespace" if kind != "none" else "") + ", no capabilities"
    else:
        who = f"{uid if isinstance(uid, str) else f'uid {uid}'} without capabilities"
    if kind == "bwrap":
        return (f"{bwrap_version()}: read-only /usr and interpreter, private /sandbox and /tmp (tmpfs), no host "
                f"files, no network (new netns), new pid/ipc/uts namespaces, {who}, {WALLS}; "
                "verdict by the judge process")
    if kind == "namespaces":
        return ("namespaces (unshare + pivot_root): read-only /usr and interpreter, private /sandbox and /tmp "
                f"(tmpfs), no host files, no network (new netns), new pid/ipc/uts namespaces, {who}, {WALLS}; "
                "verdict by the judge process")
    return (f"none (UNISOLATED: neither bubblewrap nor namespaces work here): {who}, {WALLS}, no file "
            "created or written; but the candidate can read the host's files and see its processes; "
            "verdict by the judge process")


def bwrap_version() -> str:
    """The version line of the bwrap on PATH now (cached per path, so a test's stand-in never outlives it)."""
    bwrap = find_tool("bwrap")
    if bwrap is None:
        return "bubblewrap (not installed)"
    return _bwrap_version_at(bwrap)


@functools.lru_cache(maxsize=8)
def _bwrap_version_at(bwrap: str) -> str:
    proc = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False)
    line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    return line if line.startswith("bubblewrap") else f"bubblewrap ({bwrap}, version not reported)"
