"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The new file gets the permissions a plain ``open(path, "w")`` would give it (0666 less the umask), or the mode of
the file it replaces: the temporary file is created with ``os.open(..., 0o666)``, so the kernel applies the umask
(``tempfile.mkstemp`` would make every result 0600, unreadable to the service user or a teammate's group).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from pathlib import Path


def _create_temp(directory: Path, name: str) -> tuple[int, Path]:
    """An exclusive new file beside ``name`` in ``directory``, mode 0666 less the umask."""
    while True:
        tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a temp file in the same directory, fsync, then rename over ``path`` (keeping its mode)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(path.parent, path.name)
    try:
        with os.fdopen(fd, "wb") as fh:
            with contextlib.suppress(FileNotFoundError):  # a new file keeps 0666 less the umask
                os.fchmod(fh.fileno(), stat.S_IMODE(path.stat().st_mode))
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
