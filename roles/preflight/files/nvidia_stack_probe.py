#!/usr/bin/env python
"""Report the NVIDIA driver stack of this host as JSON (read-only).

driver: the loaded kernel module's version (/sys/module/nvidia/version) when a
module is loaded, else the upstream version of the installed driver package
(what the next boot loads), else the version nvidia-smi reports;
packages: installed version of each package named on the command line;
fabricmanager: the fabric manager binary's own version (``nv-fabricmanager
--version``: "Fabric Manager version is : 580.126.20"), whatever package
installed it (NVIDIA's CUDA repository ships R580's as ``nvidia-fabricmanager``
580.x, older branches as ``nvidia-fabricmanager-<branch>``); fabric: each GPU's
NVLink fabric registration from ``nvidia-smi -q`` (Fabric State and Status;
"Completed"/"Success" once fabric manager has registered it); units:
ActiveState of each unit named; processes: whether a process with each name
runs (pgrep -x).

Usage: nvidia_stack_probe.py --driver-package P [--package P ...] [--unit U ...] [--process NAME ...]
                             [--fabricmanager-binary nv-fabricmanager] [--fabric-state]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

FM_VERSION = re.compile(r"Fabric Manager version is\s*:\s*([0-9][0-9.]*)")


def package_version(name: str) -> str | None:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status} ${Version}", name],
                          capture_output=True, text=True, check=False)
    status, version = proc.stdout.partition(" ")[::2]
    return version if proc.returncode == 0 and status == "installed" else None


def upstream(version: str | None) -> str | None:
    """580.126.20-0ubuntu1 -> 580.126.20 (epoch and Debian revision dropped)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0] if version else None


def fabricmanager(binary: str) -> dict[str, str | None]:
    """The fabric manager binary's path and the version it reports (None: not installed or not said)."""
    path = shutil.which(binary) or next((p for p in ("/usr/bin/" + binary, "/usr/sbin/" + binary)
                                         if Path(p).is_file()), None)
    if path is None:
        return {"binary": None, "version": None, "output": f"{binary} not found"}
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"binary": path, "version": None, "output": str(exc)}
    text = proc.stdout + proc.stderr
    found = FM_VERSION.search(text)
    return {"binary": path, "version": found.group(1) if found else None, "output": " ".join(text.split())[:300]}


def parse_fabric(text: str) -> list[dict[str, object]]:
    """Each GPU's Fabric State and Status from ``nvidia-smi -q`` (pure: unit-tested)."""
    gpus: list[dict[str, object]] = []
    in_fabric = False
    for line in text.splitlines():
        if line.startswith("GPU "):
            gpus.append({"gpu": line[4:].strip(), "name": "", "state": "not reported", "status": "not reported"})
            in_fabric = False
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, value = line.strip().partition(":")[::2]
        key, value = key.strip(), value.strip()
        if indent == 4:
            in_fabric = key == "Fabric" and not value
            if key == "Product Name":
                gpus[-1]["name"] = value
        elif in_fabric and indent == 8 and key in ("State", "Status"):
            gpus[-1][key.lower()] = value
    for gpu in gpus:
        gpu["ok"] = gpu["state"] == "Completed" and gpu["status"] == "Success"  # type: ignore[assignment]
        gpu["text"] = f"GPU {gpu['gpu']}: State {gpu['state']}, Status {gpu['status']}"
    return gpus


def smi_driver(smi: str = "nvidia-smi") -> str | None:
    """The driver version nvidia-smi reports (None: no nvidia-smi, or it cannot talk to a driver)."""
    try:
        proc = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = proc.stdout.strip().splitlines()[:1]
    return first[0].strip() if proc.returncode == 0 and first and first[0].strip()[:1].isdigit() else None


def fabric_state(smi: str = "nvidia-smi") -> dict[str, object]:
    try:
        proc = subprocess.run([smi, "-q"], capture_output=True, text=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"gpus": [], "error": f"{smi} -q: {exc}"}
    if proc.returncode != 0:
        return {"gpus": [], "error": f"{smi} -q failed (rc={proc.returncode}): {(proc.stderr or proc.stdout).strip()}"}
    return {"gpus": parse_fabric(proc.stdout), "error": None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--driver-package", required=True)
    parser.add_argument("--package", action="append", default=[])
    parser.add_argument("--unit", action="append", default=[])
    parser.add_argument("--process", action="append", default=[])
    parser.add_argument("--fabricmanager-binary", default="")
    parser.add_argument("--fabric-state", action="store_true")
    parser.add_argument("--module-version-file", type=Path, default=Path("/sys/module/nvidia/version"))
    args = parser.parse_args(argv)
    module = args.module_version_file
    loaded = module.read_text().strip() if module.is_file() else None
    packages = {name: package_version(name) for name in [args.driver_package, *args.package]}
    units = {}
    for unit in args.unit:
        out = subprocess.run(["systemctl", "show", unit, "-p", "ActiveState", "--value"],
                             capture_output=True, text=True, check=False).stdout.strip()
        units[unit] = out or "unknown"
    processes = {name: subprocess.run(["pgrep", "-x", name], capture_output=True, check=False).returncode == 0
                 for name in args.process}
    package = upstream(packages[args.driver_package])
    smi = None if loaded or package else smi_driver()
    driver = loaded or package or smi
    source = ("loaded kernel module" if loaded else f"package {args.driver_package}" if package
              else "nvidia-smi" if smi else "none")
    report: dict[str, object] = {
        "driver": driver, "driver_source": source, "loaded_module": loaded, "packages": packages,
        "upstream": {k: upstream(v) for k, v in packages.items()}, "units": units, "processes": processes,
    }
    if args.fabricmanager_binary:
        report["fabricmanager"] = fabricmanager(args.fabricmanager_binary)
    if args.fabric_state:
        report["fabric"] = fabric_state()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
