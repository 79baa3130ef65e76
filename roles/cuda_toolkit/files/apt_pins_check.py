#!/usr/bin/env python
"""Compare the installed Debian packages with version pins (the apt preferences' own terms).

Usage: apt_pins_check.py PINS_JSON [REQUIRED_JSON]
  PINS_JSON      {"package": "version", ...}: a package may be a glob (nvidia-*-580*), as in
                 apt_preferences' Package:, and a version a glob (580.126.20-*), as in its Pin: version
  REQUIRED_JSON  ["package", ...]: must be installed (each must be matched by a pin)
Prints one JSON object: ok, installed {package: version}, wrong ["pkg: installed X, pinned Y"],
absent ["pkg (required, not installed)"]. Exit 0 (the caller asserts on "ok").
"""

from __future__ import annotations

import json
import subprocess
import sys
from fnmatch import fnmatchcase


def installed_versions(patterns: list[str]) -> dict[str, str]:
    """Installed packages matching each name or glob -> version."""
    found: dict[str, str] = {}
    for pattern in patterns:
        proc = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status} ${Package} ${Version}\n", pattern],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in proc.stdout.splitlines():
            status, rest = line.partition(" ")[::2]
            name, version = rest.partition(" ")[::2]
            if status == "installed":
                found[name] = version
    return found


def main(argv: list[str]) -> int:
    pins: dict[str, str] = json.loads(argv[1])
    required: list[str] = json.loads(argv[2]) if len(argv) > 2 else []
    installed = installed_versions(sorted(set(pins) | set(required)))
    wrong = [
        f"{name}: installed {version}, pinned {want}"
        for name, version in sorted(installed.items())
        for pattern, want in sorted(pins.items())
        if fnmatchcase(name, pattern) and not fnmatchcase(version, want)
    ]
    absent = [f"{name} (required, not installed)" for name in required if name not in installed]
    absent += [
        f"{name} (required, not pinned)" for name in required if not any(fnmatchcase(name, p) for p in pins)
    ]
    print(json.dumps({"ok": not wrong and not absent, "installed": installed, "wrong": wrong, "absent": absent}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
