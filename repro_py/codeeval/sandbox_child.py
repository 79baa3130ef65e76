"""The process inside the coding sandbox: it runs the candidate's code and answers calls, nothing more.

Its source is handed to ``python -I -S -c`` (the sandbox's file system holds no
project file), with one JSON argument: the request and reply pipe descriptors,
the resource limits, the uid to drop to and, for the namespace fallback, the
jail to build. Before it reads the candidate's code it puts up the walls that
hold in every isolation mode (``_walls``): resource limits, ``no_new_privs``
and a seccomp filter under which this process is the sandbox's only task (no
fork, no thread), sends no signal, traces nothing, opens no socket and
changes no mount, namespace or limit; in mode ``none`` (no private file
system) it also creates, writes and removes no file. It
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
        ("RLIMIT_NPROC", 1),  # this process alone (seccomp refuses clone/fork anyway)
        ("RLIMIT_NOFILE", limits["nofile"]),
    ):
        hard = value + 1 if name == "RLIMIT_CPU" else value  # SIGXCPU at the soft limit, SIGKILL at the hard
        resource.setrlimit(getattr(resource, name), (value, hard))


# seccomp: the syscalls refused with EPERM, per architecture (AUDIT_ARCH value, numbers from the kernel's
# syscall tables). "tasks" and "others" hold in every mode; "files" only where the sandbox has no private
# file system (mode none), with open/openat refused only when asked to write, create, truncate or append.
_SECCOMP: dict[str, dict[str, Any]] = {
    "x86_64": {
        "arch": 0xC000003E, "open": {2: 1, 257: 2},  # open (flags: arg 1), openat (flags: arg 2)
        "tasks": [56, 57, 58, 435],  # clone fork vfork clone3
        "others": [62, 200, 234, 129, 297, 424, 434, 438,  # kill tkill tgkill rt_(tg)sigqueueinfo pidfd_*
                   101, 310, 311, 312, 440,  # ptrace process_vm_readv/writev kcmp process_madvise
                   41, 53, 425, 426, 427,  # socket socketpair io_uring_*
                   272, 308, 165, 166, 155, 161, 428, 429, 430, 431, 432, 433,  # unshare setns mounts chroot
                   160, 302, 141,  # setrlimit prlimit64 setpriority
                   321, 298, 323, 250, 248, 249, 319],  # bpf perf_event_open userfaultfd keyctl keys memfd_create
        "files": [85, 437, 83, 258, 84, 87, 263, 86, 265, 88, 266, 82, 264, 316, 76, 133, 259],
    },
    "aarch64": {
        "arch": 0xC00000B7, "open": {56: 2},  # openat (flags: arg 2)
        "tasks": [220, 435],  # clone clone3
        "others": [129, 130, 131, 138, 240, 424, 434, 438, 117, 270, 271, 272, 440, 198, 199, 425, 426, 427,
                   97, 268, 40, 39, 41, 51, 428, 429, 430, 431, 432, 433, 164, 261, 140,
                   280, 241, 282, 219, 217, 218, 279],
        "files": [437, 34, 35, 37, 36, 38, 276, 45, 33],
    },
}
_WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # O_WRONLY O_RDWR O_CREAT O_TRUNC O_APPEND


def seccomp_program(machine: str, *, files: bool) -> list[tuple[int, int, int, int]]:
    """The classic-BPF filter (code, jt, jf, k) for ``machine``; raises KeyError for another architecture."""
    table = _SECCOMP[machine]
    allow, deny, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # RET_ALLOW, RET_ERRNO|EPERM, RET_KILL_PROCESS
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    denied = table["tasks"] + table["others"] + (table["files"] if files else [])
    opens = sorted(table["open"].items()) if files else []
    head = [(ld, 0, 0, 4), (jeq, 1, 0, table["arch"]), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if machine == "x86_64":
        head.append((jge, 0, 0, 0x40000000))  # x32 ABI numbers: refused (jt patched below)
    body_len = len(opens) + len(denied) + 1  # the jumps, then RET_ALLOW
    deny_at = len(head) + body_len + 3 * len(opens)  # after the open-flag checks
    prog = list(head)
    if machine == "x86_64":
        prog[-1] = (jge, deny_at - len(prog), 0, 0x40000000)
    for i, (nr, _) in enumerate(opens):
        check_at = len(head) + body_len + 3 * i
        prog.append((jeq, check_at - len(prog) - 1, 0, nr))
    for nr in denied:
        prog.append((jeq, deny_at - len(prog) - 1, 0, nr))
    prog.append((ret, 0, 0, allow))
    for _, arg in opens:  # open flags: the low 32 bits of the argument (little-endian seccomp_data)
        prog += [(ld, 0, 0, 16 + 8 * arg), (jset, deny_at - len(prog) - 2, 0, _WRITE_FLAGS), (ret, 0, 0, allow)]
    prog.append((ret, 0, 0, deny))
    return prog


def _seccomp(files: bool) -> None:
    """Install the filter (after ``no_new_privs``); any failure stops the sandbox before the candidate runs."""
    import ctypes  # noqa: PLC0415
    import platform  # noqa: PLC0415

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    prog = seccomp_program(platform.machine(), files=files)
    array = (Filter * len(prog))(*(Filter(*ins) for ins in prog))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(Program(len(prog), array)), 0, 0) != 0:  # PR_SET_SECCOMP, MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP): the kernel refused the filter")


def _drop_to(uid: int) -> None:
    """Root without a jail (mode none): become the sandbox's own uid, with no group and no capability."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


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


def _walls(config: dict[str, Any]) -> None:
    """Everything that holds before the candidate's first line: jail or uid, limits, seccomp."""
    # loaded before the uid changes: mode none's uid may not read the interpreter's library
    import ctypes  # noqa: F401, PLC0415
    import platform  # noqa: F401, PLC0415
    import resource  # noqa: F401, PLC0415
    import signal  # noqa: PLC0415

    if config.get("jail"):
        _jail(config["jail"])
    elif config.get("drop_uid") is not None:
        _drop_to(int(config["drop_uid"]))
    signal.signal(signal.SIGXCPU, _on_sigxcpu)
    _limits(config["limits"])
    _seccomp(bool(config.get("no_files")))


def serve(config: dict[str, Any]) -> None:
    _walls(config)
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
