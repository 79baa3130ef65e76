"""File helpers shared by the sglang_service modules (stdlib only).

Every write is atomic (a temporary file in the destination's directory, then
rename): a reader sees the old file or the new one, never half of either.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import tempfile
from pathlib import Path


def sha256_of(path):
    """The file's sha256, or ``"none"`` when it does not exist (the fingerprint's word for absent)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return "none"


def _owner_ids(owner, group):
    uid = 0 if owner == "root" else pwd.getpwnam(owner).pw_uid
    gid = 0 if group == "root" else grp.getgrnam(group).gr_gid
    return uid, gid


def write_file(dest, data, mode, owner="root", group="root"):
    """Write ``data`` (bytes) to ``dest`` atomically with this mode and owner; True when anything changed."""
    dest = Path(dest)
    uid, gid = _owner_ids(owner, group)
    try:
        st = dest.stat()
        same = dest.read_bytes() == data and (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, gid)
    except FileNotFoundError:
        same = False
    if same:
        return False
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chown(tmp, uid, gid)
        Path(tmp).chmod(mode)
        Path(tmp).replace(dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def copy_file(src, dest, mode, owner="root", group="root"):
    """Copy ``src`` to ``dest`` (see write_file); True when anything changed."""
    return write_file(dest, Path(src).read_bytes(), mode, owner, group)


def remove_file(path):
    """Remove ``path`` when it exists; True when it did."""
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return False
    return True
