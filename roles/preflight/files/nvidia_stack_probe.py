#!/usr/bin/env python3
"""Report the NVIDIA driver stack of this host as JSON (read-only).

driver: the loaded kernel module's version (/sys/module/nvidia/version) when a
module is loaded, else the upstream version of the installed driver package;
packages: installed version of each package named on the command line;
units: ActiveState of each unit named; processes: whether a process with each
name runs (pgrep -x).

Usage: nvidia_stack_probe.py --driver-package P [--package P ...] [--unit U ...] [--process NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def package_version(name: str) -> str | None:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", name],
                          capture_output=True, text=True, check=False)
    status, _, version = proc.stdout.partition(" ")
    return version if proc.returncode == 0 and status == "installed" else None


def upstream(version: str | None) -> str | None:
    """580.126.20-0ubuntu1 -> 580.126.20 (epoch and Debian revision dropped)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0] if version else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver-package", required=True)
    parser.add_argument("--package", action="append", default=[])
    parser.add_argument("--unit", action="append", default=[])
    parser.add_argument("--process", action="append", default=[])
    args = parser.parse_args(argv)
    module = Path("/sys/module/nvidia/version")
    loaded = module.read_text().strip() if module.is_file() else None
    packages = {name: package_version(name) for name in [args.driver_package, *args.package]}
    units = {}
    for unit in args.unit:
        out = subprocess.run(["systemctl", "show", unit, "-p", "ActiveState", "--value"],
                             capture_output=True, text=True, check=False).stdout.strip()
        units[unit] = out or "unknown"
    processes = {name: subprocess.run(["pgrep", "-x", name], capture_output=True, check=False).returncode == 0
                 for name in args.process}
    driver = loaded or upstream(packages[args.driver_package])
    source = "loaded kernel module" if loaded else (f"package {args.driver_package}" if driver else "none")
    print(json.dumps({"driver": driver, "driver_source": source, "packages": packages,
                      "upstream": {k: upstream(v) for k, v in packages.items()}, "units": units,
                      "processes": processes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
