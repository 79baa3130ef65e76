#!/usr/bin/env python
"""Check model directories the way the server will read them (run as the service user).

For each directory: it can be listed, config.json parses, and every
safetensors shard the server will open is there and whole:
- the shards are the files named by `*.safetensors.index.json` (its
  weight_map), or the directory's `*.safetensors` files when there is no index;
- each shard opens for reading (as the user running this check), its header
  (8-byte little-endian length + JSON) parses, and its size is exactly
  8 + header + the largest tensor end offset (a truncated download is smaller);
- every tensor the index maps to a shard is in that shard's header;
- the data of all shards adds up to the index's metadata.total_size.
Only headers are read: a 548 GB model is checked in seconds.

Usage: model_check.py DIR [DIR ...]
Prints one JSON object {"ok", "uid", "dirs": [{"path", "shards", "bytes", "errors", "warnings"}]}.
Exit 0 when every directory is usable, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on the header


def read_header(path: Path) -> tuple[dict[str, object], int, int]:
    """(header, header length, end of the tensor data) of a safetensors file; raises OSError/ValueError."""
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ValueError(f"{len(raw)} bytes: shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise ValueError(f"header length {length} is not plausible (over {MAX_HEADER})")
        header = json.loads(f.read(length) or b"null")
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    return header, length, max(ends, default=0)


def check_dir(directory: Path) -> dict[str, object]:
    errors: list[str] = []
    warnings: list[str] = []
    result: dict[str, object] = {"path": str(directory), "shards": 0, "bytes": 0, "errors": errors,
                                 "warnings": warnings}
    try:
        names = sorted(p.name for p in directory.iterdir())
    except OSError as exc:
        errors.append(f"cannot list {directory}: {exc.strerror}")
        return result
    try:
        json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as exc:
        errors.append(f"config.json: {getattr(exc, 'strerror', None) or exc}")
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    weight_map: dict[str, str] = {}
    total_size = None
    if indexes:
        try:
            index = json.loads((directory / indexes[0]).read_text())
            weight_map = dict(index["weight_map"])
            total_size = (index.get("metadata") or {}).get("total_size")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            errors.append(f"{indexes[0]}: {getattr(exc, 'strerror', None) or exc!r}")
        shards = sorted(set(weight_map.values()))
    else:
        shards = [n for n in names if n.endswith(".safetensors")]
        if not shards:
            errors.append("no *.safetensors.index.json and no *.safetensors file")
    data_bytes = total_bytes = 0
    for shard in shards:
        path = directory / shard
        if not path.exists():
            errors.append(f"{shard}: missing (named by {indexes[0] if indexes else 'the directory'})")
            continue
        try:
            header, length, data_end = read_header(path)
        except OSError as exc:
            errors.append(f"{shard}: not readable by uid {os.getuid()}: {exc.strerror}")
            continue
        except ValueError as exc:
            errors.append(f"{shard}: not a safetensors file: {exc}")
            continue
        size, expected = path.stat().st_size, 8 + length + data_end
        if size < expected:
            errors.append(f"{shard}: {size} bytes, its header needs {expected} (truncated)")
        elif size > expected:
            warnings.append(f"{shard}: {size} bytes, {size - expected} more than its header describes")
        data_bytes += data_end
        total_bytes += size
        absent = [t for t, s in weight_map.items() if s == shard and t not in header]
        if absent:
            errors.append(f"{shard}: {len(absent)} tensor(s) of the index not in its header, e.g. {absent[0]}")
    result.update(shards=len(shards), bytes=total_bytes)
    if total_size is not None and not errors and int(total_size) != data_bytes:
        (errors if data_bytes < int(total_size) else warnings).append(
            f"shards hold {data_bytes} bytes of tensors, the index's total_size is {total_size}")
    return result


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dirs = [check_dir(Path(d)) for d in argv[1:]]
    ok = all(not d["errors"] for d in dirs)
    print(json.dumps({"ok": ok, "uid": os.getuid(), "dirs": dirs}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
