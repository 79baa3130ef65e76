#!/usr/bin/env python
"""The installed packages of the NVIDIA driver branch and the loaded kernel module, as JSON (read-only).

packages: every installed package whose name matches one of the apt_preferences
globs given (``--glob 'nvidia-*-580*'`` ...), with its version, upstream version
and dpkg selection (``hold`` once held); module: the loaded kernel module's
version (``/sys/module/nvidia/version``), or null; drift: the packages whose
upstream version is not the loaded module's (the driver's user-space libraries
must equal the kernel module, or the next CUDA start fails with "Driver/library
version mismatch"); ``--exclude`` names packages with their own numbering (nvlsm).

Usage: driver_packages.py --glob GLOB [--glob GLOB ...] [--exclude NAME ...] [--module-version-file PATH]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from pathlib import Path


def upstream(version: str) -> str:
    """580.126.20-0ubuntu1 -> 580.126.20 (epoch and Debian revision dropped)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def installed(globs: list[str]) -> list[dict[str, str]]:
    fmt = "-f=${Package}\\t${Version}\\t${db:Status-Status}\\t${db:Status-Want}\\n"
    proc = subprocess.run(["dpkg-query", "-W", fmt], capture_output=True, text=True, check=False)
    out = []
    for line in proc.stdout.splitlines():
        name, version, status, want = [*line.split("\t"), "", "", ""][:4]
        if status == "installed" and any(fnmatch.fnmatchcase(name, g) for g in globs):
            out.append({"name": name, "version": version, "upstream": upstream(version), "selection": want})
    return sorted(out, key=lambda p: p["name"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--glob", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--module-version-file", type=Path, default=Path("/sys/module/nvidia/version"))
    args = parser.parse_args(argv)
    module = args.module_version_file.read_text().strip() if args.module_version_file.is_file() else None
    packages = installed(args.glob)
    drift = [p for p in packages if module and p["name"] not in args.exclude and p["upstream"] != module]
    print(json.dumps({"module": module, "packages": packages, "drift": drift}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
