#!/usr/bin/env python
"""Run a command in the sandbox of an existing systemd service unit.

The command runs as a transient oneshot unit whose [Service] section is the
target unit's own, verbatim (User=, Group=, WorkingDirectory=, every
Environment= and EnvironmentFile=, CacheDirectory=, the hardening), with only
the process settings replaced: Type=oneshot, Restart=no, no ExecStartPre/Post/
Stop/Reload, ExecStart= the command, stdout to a file. The target unit itself
is not touched (its start counters neither). The transient unit lives in
/run/systemd/system and is removed afterwards.

Usage (root): unit_sandbox_run.py --unit-file PATH --name NAME [--timeout S] -- CMD [ARG ...]
Prints one JSON object: rc (the command's exit status, or null), result
(systemd's Result=), stdout (what the command printed), journal (its last
lines when it failed). Exit 0 when the command exited 0, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

RUN_DIR = Path("/run/systemd/system")
OUT_DIR = Path("/run/sglang-deploy")
# Settings of the copied [Service] section that are replaced (empty value = reset the list).
OVERRIDES = ("ExecCondition=", "ExecStartPre=", "ExecStartPost=", "ExecStop=", "ExecStopPost=", "ExecReload=",
             "Type=oneshot", "RemainAfterExit=no", "Restart=no", "WatchdogSec=0")


def service_section(unit_text: str) -> str:
    """The [Service] section's lines (continuation lines kept), without the header."""
    lines, inside = [], False
    for line in unit_text.splitlines():
        header = re.fullmatch(r"\s*\[([^\]]+)\]\s*", line)
        if header:
            inside = header.group(1) == "Service"
            continue
        if inside:
            lines.append(line)
    return "\n".join(lines).strip("\n")


def quote(word: str) -> str:
    """One word of an Exec line: specifiers and variables kept literal, quoted when needed."""
    w = word.replace("%", "%%").replace("$", "$$")
    if w == "" or re.search(r"[\s\"'\\;]", w):
        return '"' + w.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return w


def transient_unit(source: Path, name: str, cmd: list[str], timeout: int, out: Path) -> str:
    section = service_section(source.read_text())
    if not section:
        raise ValueError(f"{source} has no [Service] section")
    return "\n".join([
        f"# Transient: runs a check in the sandbox of {source.name} (its [Service] section, verbatim).",
        "[Unit]",
        f"Description=Check in the sandbox of {source.name}",
        "",
        "[Service]",
        section,
        "",
        "# Replaced for the check:",
        *OVERRIDES,
        "ExecStart=",
        "ExecStart=" + " ".join(quote(w) for w in cmd),
        f"TimeoutStartSec={timeout}",
        f"StandardOutput=truncate:{out}",
        "StandardError=journal",
        "",
    ])


def systemctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=timeout, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--unit-file", type=Path, required=True)
    parser.add_argument("--name", required=True, help="transient unit name (without .service)")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("cmd", nargs="+")
    args = parser.parse_args(argv)
    unit = f"{args.name}.service"
    path, out = RUN_DIR / unit, OUT_DIR / f"{args.name}.out"
    report: dict[str, object] = {"unit": unit, "source": str(args.unit_file), "rc": None}
    try:
        OUT_DIR.mkdir(mode=0o755, exist_ok=True)
        path.write_text(transient_unit(args.unit_file, args.name, args.cmd, args.timeout, out))
        systemctl("daemon-reload")
        started = systemctl("start", unit, timeout=args.timeout + 60)
        show = systemctl("show", unit, "-p", "Result", "-p", "ExecMainStatus", "-p", "InvocationID")
        props = dict(line.split("=", 1) for line in show.stdout.splitlines() if "=" in line)
        report.update(result=props.get("Result"), start_rc=started.returncode, start_stderr=started.stderr.strip())
        report["rc"] = int(props["ExecMainStatus"]) if props.get("ExecMainStatus", "").isdigit() else None
        report["stdout"] = out.read_text() if out.exists() else ""
        if started.returncode != 0 or report["rc"] != 0:
            invocation = f"_SYSTEMD_INVOCATION_ID={props.get('InvocationID', '')}"
            journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat", "-n", "60", invocation],
                                     capture_output=True, text=True, check=False)
            report["journal"] = journal.stdout[-6000:]
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        report["error"] = str(exc)
    finally:
        systemctl("stop", unit)
        systemctl("reset-failed", unit)
        path.unlink(missing_ok=True)
        out.unlink(missing_ok=True)
        systemctl("daemon-reload")
    print(json.dumps(report))
    return 0 if report["rc"] == 0 and "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())
