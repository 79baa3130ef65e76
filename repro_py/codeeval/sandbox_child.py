"""The process inside the coding sandbox: it runs the candidate's code and answers calls, nothing more.

Its source is handed to ``python -I -S -c`` (the sandbox's file system holds no
project file), with one JSON argument: the request and reply pipe descriptors,
the resource limits and, for the namespace fallback, the jail to build. It
never sees a hidden test, an expected value or a verdict: the judge (the
parent, ``sandbox.py``) sends ``load`` (the code) and ``call`` (a function
name and plain-data arguments) requests and decides everything from the
plain-data replies. Whatever the candidate does to this process (patching
builtins, writing to the pipes itself, exiting) can only change what comes
back, which the judge checks as data.

Values cross the pipes as tagged JSON: ``None``, ``bool``, ``int``, finite
``float``, ``str`` and ``list`` as themselves; ``{"$f": "nan"|"inf"|"-inf"}``,
``{"$t": [...]}`` (tuple), ``{"$s": [...]}`` (set), ``{"$fs": [...]}``
(frozenset), ``{"$d": [[k, v], ...]}`` (dict), ``{"$b": "hex"}`` (bytes).
Only these exact types encode; an instance of any other class (for example
one whose ``__eq__`` always says yes) is an error, never a value.

Stdlib only: this file must run in an isolated interpreter with no site packages.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

MAX_DEPTH = 64


class EncodeError(TypeError):
    pass


def encode(value: Any, depth: int = 0) -> Any:
    """Plain data as tagged JSON; anything else raises EncodeError."""
    if depth > MAX_DEPTH:
        raise EncodeError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$f": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$t": [encode(v, depth + 1) for v in value]}
    if kind is set:
        return {"$s": [encode(v, depth + 1) for v in value]}
    if kind is frozenset:
        return {"$fs": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"$d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"$b": value.hex()}
    raise EncodeError(f"a {kind.__module__}.{kind.__qualname__} is not plain data")


def decode(data: Any, depth: int = 0) -> Any:
    """The inverse of ``encode``; raises ValueError on anything it would not produce."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if data is None or type(data) in (bool, int, str):
        return data
    if type(data) is float:
        if not math.isfinite(data):
            raise ValueError("a bare non-finite float")
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is dict and len(data) == 1:
        (tag, body), = data.items()
        if tag == "$f" and body in ("nan", "inf", "-inf"):
            return float(body)
        if tag == "$b" and type(body) is str:
            return bytes.fromhex(body)
        if type(body) is list:
            items = [decode(v, depth + 1) for v in body]
            if tag == "$t":
                return tuple(items)
            if tag == "$s":
                return set(items)
            if tag == "$fs":
                return frozenset(items)
            if tag == "$d" and all(type(p) is list and len(p) == 2 for p in items):
                return {k: v for k, v in items}
    raise ValueError(f"not a tagged value: {str(data)[:200]}")


def _limits(limits: dict[str, int]) -> None:
    import resource  # noqa: PLC0415

    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["nproc"]),
        ("RLIMIT_NOFILE", limits["nofile"]),
    ):
        hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL at the hard
        resource.setrlimit(getattr(resource, name), (value, hard))


def _jail(spec: dict[str, Any]) -> None:
    """The namespace fallback (no bubblewrap): build a root of read-only binds and private tmpfs
    mounts, pivot into it, then drop to an unprivileged uid (or, in a user namespace, every capability)."""
    import ctypes  # noqa: PLC0415
    import platform  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec, ms_private = (
        1, 2, 4, 8, 32, 4096, 16384, 1 << 18)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
        enc = [None if s is None else s.encode() for s in (src, dst, fstype, data)]
        check(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {dst}")

    root = spec["root"]
    mount(None, "/", None, ms_rec | ms_private)
    mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, "size=1m,mode=0755")
    for path in spec["binds"]:
        target = Path(root + path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(path).is_symlink():
            target.symlink_to(Path(path).readlink())
            continue
        target.mkdir(parents=True, exist_ok=True)
        mount(path, str(target), None, ms_bind | ms_rec)
        locked = os.statvfs(path).f_flag & (ms_nosuid | ms_nodev | ms_noexec)
        mount(None, str(target), None, ms_bind | ms_remount | ms_rdonly | ms_nosuid | ms_nodev | locked)
    (Path(root) / "dev").mkdir()
    for dev in ("null", "zero", "urandom", "random"):
        (Path(root) / "dev" / dev).touch()  # a mount point
        mount("/dev/" + dev, root + "/dev/" + dev, None, ms_bind)
    for name, size in (("sandbox", spec["work_bytes"]), ("tmp", 1 << 20)):
        (Path(root) / name).mkdir()
        mount("tmpfs", root + "/" + name, "tmpfs", ms_nosuid | ms_nodev, f"size={size},mode=01777")
    (Path(root) / "proc").mkdir()
    mount("proc", root + "/proc", "proc", ms_nosuid | ms_nodev | ms_noexec)
    (Path(root) / ".old").mkdir()
    pivot_root = {"x86_64": 155, "aarch64": 41}[platform.machine()]
    check(libc.syscall(pivot_root, root.encode(), (root + "/.old").encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old", 2), "umount /.old")  # MNT_DETACH: the host's tree is gone
    Path("/.old").rmdir()
    mount(None, "/", None, ms_remount | ms_rdonly | ms_nosuid | ms_nodev, "size=1m")
    os.chdir("/sandbox")
    check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
    uid = spec.get("uid")
    if uid is not None:  # root in the host's user namespace: become a uid of our own, losing every capability
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    else:  # root of a user namespace: drop every capability it gave
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)()
        check(libc.capset(header, data), "capset")


class CPULimitExceeded(BaseException):  # its name is what the judge reads
    """Raised into the candidate's code at the CPU soft limit (SIGXCPU); the hard limit kills a second later."""


def _on_sigxcpu(signum: int, frame: Any) -> None:
    raise CPULimitExceeded("CPU time limit reached")


def _raised(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)[:2000]}


def serve(config: dict[str, Any]) -> None:
    if config.get("jail"):
        _jail(config["jail"])
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGXCPU, _on_sigxcpu)
    _limits(config["limits"])
    requests = os.fdopen(config["req_fd"], "r", encoding="utf-8")
    replies = os.fdopen(config["resp_fd"], "w", encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": "__candidate__"}
    for line in requests:
        msg = json.loads(line)
        reply: dict[str, Any]
        if msg["op"] == "load":
            try:
                exec(compile(msg["code"], "candidate.py", "exec"), namespace)  # the sandbox's purpose
                reply = {"loaded": [k for k, v in namespace.items() if callable(v) and not k.startswith("__")]}
            except BaseException as exc:  # every failure is the candidate's result
                reply = {"raised": _raised(exc)}
        elif msg["op"] == "call":
            try:
                args, kwargs = decode(msg["args"]), decode(msg["kwargs"])
                value = namespace[msg["name"]](*args, **kwargs)
                reply = {"value": encode(value), "args": encode(args)}
            except BaseException as exc:
                reply = {"raised": _raised(exc)}
        else:
            break
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    os._exit(0)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
