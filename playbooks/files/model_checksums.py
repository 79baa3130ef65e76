#!/usr/bin/env python
"""sha256 of every file of model directories, cached by (size, mtime).

A 548 GB model is hashed once: the cache (a JSON file on the host) keeps each
file's size, mtime_ns and sha256, and a file whose size and mtime are
unchanged is not read again. The cache is replaced atomically.
Hidden entries (.cache/, .git/ ...) are skipped; the Hugging Face revision is
read from .cache/huggingface/download/*.metadata (first line) when present.

Usage: model_checksums.py --cache FILE DIR [DIR ...]
Prints one JSON object {"dirs": {DIR: {"files": {rel: {"sha256", "size"}}, "revision",
"hashed", "cached", "bytes_hashed"}}, "sha256sum": ["<sha256>  <path>", ...]} (the last
in `sha256sum -c` format). Exit 1 when a directory cannot be read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

CHUNK = 16 * 1024 * 1024


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def revision(directory: Path) -> str | None:
    revs = set()
    for meta in sorted((directory / ".cache" / "huggingface" / "download").glob("**/*.metadata")):
        first = meta.read_text(errors="replace").splitlines()[:1]
        if first:
            revs.add(first[0].strip())
    return ", ".join(sorted(revs)) or None


def scan(directory: Path, cache: dict[str, dict[str, object]]) -> dict[str, object]:
    files: dict[str, dict[str, object]] = {}
    hashed = cached = bytes_hashed = 0
    for current, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            path = Path(current) / name
            if not path.is_file():
                continue
            st = path.stat()
            entry = cache.get(str(path))
            if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
                cached += 1
            else:
                entry = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_of(path)}
                cache[str(path)] = entry
                hashed += 1
                bytes_hashed += st.st_size
            files[str(path.relative_to(directory))] = {"sha256": entry["sha256"], "size": entry["size"]}
    return {"files": files, "revision": revision(directory), "hashed": hashed, "cached": cached,
            "bytes_hashed": bytes_hashed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        cache = json.loads(args.cache.read_text())
    except (OSError, ValueError):
        cache = {}
    report: dict[str, dict[str, object]] = {}
    status = 0
    for directory in args.dirs:
        if not directory.is_dir():
            report[str(directory)] = {"error": "not a directory (or not readable)"}
            status = 1
            continue
        report[str(directory)] = scan(directory, cache)
    args.cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=args.cache.parent, delete=False, suffix=".tmp") as tmp:
        json.dump(cache, tmp)
    Path(tmp.name).replace(args.cache)
    lines = [
        f"{f['sha256']}  {directory}/{rel}"
        for directory, r in report.items()
        for rel, f in sorted(dict(r.get("files", {})).items())  # type: ignore[union-attr]
    ]
    print(json.dumps({"dirs": report, "sha256sum": lines}))
    return status


if __name__ == "__main__":
    sys.exit(main())
