#!/usr/bin/env python
"""Compare what a virtual environment holds with a hash-locked requirements file.

Run with the venv's own interpreter (stdlib only). Prints one JSON object:
{"ok": bool, "missing": [...], "extra": [...], "mismatched": [...], "diff": "..."}
where the diff is `name==version` lines, expected (lock + local wheels) vs
installed (what `pip freeze` lists: pip, setuptools, wheel and distribute are
left out unless the lock pins them).
"""

# ruff: noqa: PTH123
from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import json
import re
import sys

FREEZE_SKIPS = {"pip", "setuptools", "wheel", "distribute"}
REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*===?\s*([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = REQ.match(line.strip())
            if m:
                pins[canonical(m.group(1))] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    out: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out.setdefault(canonical(name), dist.version)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", required=True)
    parser.add_argument("--wheel", action="append", default=[], help="NAME==VERSION of a local wheel")
    args = parser.parse_args()
    want = read_lock(args.lock)
    for spec in args.wheel:
        name, version = spec.partition("==")[::2]
        want[canonical(name)] = version
    have = {n: v for n, v in installed().items() if n not in FREEZE_SKIPS or n in want}
    missing = sorted(f"{n}=={v}" for n, v in want.items() if n not in have)
    extra = sorted(f"{n}=={v}" for n, v in have.items() if n not in want)
    mismatched = sorted(f"{n}: locked {want[n]}, installed {have[n]}" for n in want if n in have and have[n] != want[n])
    diff = "".join(
        difflib.unified_diff(
            [f"{n}=={v}\n" for n, v in sorted(want.items())],
            [f"{n}=={v}\n" for n, v in sorted(have.items())],
            "lock",
            "installed",
            n=0,
        )
    )
    result = {
        "ok": not (missing or extra or mismatched),
        "missing": missing,
        "extra": extra,
        "mismatched": mismatched,
        "diff": diff,
        "python": sys.version.split()[0],
        "count": len(have),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
