#!/usr/bin/env python
"""Open every GPU device node the server needs, as the service user, inside the unit's sandbox.

    python sglang-device-check.py [--allow-no-driver] NODE...

Runs as an ``ExecStartPre=`` of the unit (no ``+``: same user, groups,
namespaces and device policy as the server), before the model load, so a node
that the hardened unit cannot open fails the start in seconds with the cause,
instead of a CUDA init error after the weights are loaded.

What each result means (``open(2)`` with O_RDWR, as the CUDA driver opens them):

- success: the node is visible, its mode lets this user in, no device policy
  blocks it, and a driver answered;
- ENOENT: the node is missing in this sandbox (not created: nvidia-modprobe did
  not run or failed; or hidden: ``PrivateDevices=``, ``InaccessiblePaths=``);
- EACCES: file permissions (mode/owner/group) keep this user out;
- EPERM: a device cgroup blocks it (``DevicePolicy=``/``DeviceAllow=``, and
  ``ProtectClock=`` on systemd < 252, which implies a device allow-list);
- ENXIO/ENODEV: every check above passed, but no driver is registered for the
  node's major number. On a GPU host that is a failure (the driver is not
  loaded). ``--allow-no-driver`` accepts it: test hosts without a GPU use
  stand-in nodes with the real major numbers to prove the permission layers.

Exit status 0 when every node passed, 1 otherwise (one line per node).
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
import sys
from pathlib import Path

CAUSES = {
    errno.ENOENT: "missing in the unit's sandbox (not created, or hidden by PrivateDevices=/InaccessiblePaths=)",
    errno.EACCES: "permission denied by the node's mode/owner/group",
    errno.EPERM: "blocked by a device cgroup (DevicePolicy=/DeviceAllow=, or ProtectClock= on systemd < 252)",
}
NO_DRIVER = (errno.ENXIO, errno.ENODEV)


def who() -> str:
    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    groups = []
    for g in sorted({gid, *os.getgroups()}):
        try:
            groups.append(grp.getgrgid(g).gr_name)
        except KeyError:
            groups.append(str(g))
    return f"{user} (groups {','.join(groups)})"


def describe(path: str) -> str:
    try:
        st = Path(path).stat()
    except OSError:
        return ""
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    kind = "char" if stat.S_ISCHR(st.st_mode) else "not a char device"
    return f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} mode {stat.S_IMODE(st.st_mode):04o} {owner}:{group}"


def check(path: str, allow_no_driver: bool) -> tuple[bool, str]:
    """(passed, one line saying why)."""
    info = describe(path)
    if info and "not a char device" in info:
        return False, f"{path}: {info}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        if exc.errno in NO_DRIVER:
            verdict = "reachable, no driver behind it"
            if not allow_no_driver:
                verdict = "no driver answers (is the NVIDIA driver loaded?)"
            return allow_no_driver, f"{path}: {name}: {verdict} [{info}]"
        cause = CAUSES.get(exc.errno or 0, exc.strerror or "")
        return False, f"{path}: {name}: {cause}" + (f" [{info}]" if info else "")
    os.close(fd)
    return True, f"{path}: opened [{info}]"


def main(argv: list[str]) -> int:
    allow_no_driver = "--allow-no-driver" in argv
    nodes = [a for a in argv if a != "--allow-no-driver"]
    if not nodes:
        print("sglang-device-check: no device nodes given", file=sys.stderr)
        return 2
    results = [check(node, allow_no_driver) for node in nodes]
    failed = [line for ok, line in results if not ok]
    for ok, line in results:
        print(f"sglang-device-check: {'ok  ' if ok else 'FAIL'} {line}", file=sys.stderr if not ok else sys.stdout)
    summary = f"{len(nodes) - len(failed)}/{len(nodes)} GPU device nodes open for {who()}"
    print(f"sglang-device-check: {summary}" + ("" if not failed else "; the server would fail CUDA init"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
