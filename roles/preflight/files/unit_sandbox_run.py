#!/usr/bin/env python
"""Run a command in the sandbox of an existing systemd service unit.

The command runs as a transient oneshot unit whose [Service] section is the
target unit's own, verbatim (User=, Group=, WorkingDirectory=, every
Environment= and EnvironmentFile=, CacheDirectory=, the hardening), with only
the process settings replaced: Type=oneshot, Restart=no, no ExecStartPre/Post/
Stop/Reload, ExecStart= the command, stdout to a file. The target unit itself
is not touched (its start counters neither). The transient unit lives in
/run/systemd/system and is removed afterwards.

Usage (root):
  unit_sandbox_run.py --unit-file PATH --name NAME [--timeout S] [--sync-limit S] -- CMD [ARG ...]
  unit_sandbox_run.py --attach --name NAME [--timeout S]

The start queues the unit and waits for it up to --sync-limit seconds (default:
the whole --timeout). A check that ends by then (a cached one takes a second)
is reported at once; one that does not goes on in systemd, detached from this
process, and the start prints {"pending": true}: --attach then waits for that
same run (it never starts it again), reports it and removes the unit. So the
caller needs an async job only for a check that really compiles.
Prints one JSON object: rc (the command's exit status, or null), result
(systemd's Result=), stdout (what the command printed), journal (its last
lines when it failed); or pending. Exit 0 when the command exited 0 or is
pending, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
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


def settled(props: dict[str, str]) -> bool:
    """The run is over: no job queued or running for the unit, and it is not starting or stopping. A oneshot is
    `activating` while its command runs; a queued start shows as a Job with the unit still inactive."""
    busy = ("activating", "deactivating", "reloading")
    return props.get("Job", "") in ("", "0") and props.get("ActiveState") not in busy


def show(unit: str, *names: str) -> dict[str, str]:
    out = systemctl("show", unit, *(f"-p{name}" for name in names)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_settled(state: Callable[[], dict[str, str]], limit: float) -> bool:
    """Poll until the run is over or `limit` seconds have passed (quickly at first, a cached check ends within a
    second, then every 2 s); True when it is over."""
    deadline, pause = time.monotonic() + limit, 0.1
    while True:
        if settled(state()):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 2.0)


def collect(unit: str, out: Path, report: dict[str, object]) -> None:
    """The finished run's result, exit status, output, and on a failure its journal lines."""
    props = show(unit, "Result", "ExecMainStatus", "InvocationID")
    report["result"] = props.get("Result")
    report["rc"] = int(props["ExecMainStatus"]) if props.get("ExecMainStatus", "").isdigit() else None
    report["stdout"] = out.read_text() if out.exists() else ""
    if report["rc"] != 0:
        invocation = f"_SYSTEMD_INVOCATION_ID={props.get('InvocationID', '')}"
        journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat", "-n", "60", invocation],
                                 capture_output=True, text=True, check=False)
        report["journal"] = journal.stdout[-6000:]


def remove(unit: str, path: Path, out: Path) -> None:
    systemctl("stop", unit)
    systemctl("reset-failed", unit)
    path.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    systemctl("daemon-reload")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--unit-file", type=Path, help="the unit whose [Service] section the command runs in")
    parser.add_argument("--name", required=True, help="transient unit name (without .service)")
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--sync-limit", type=float, default=None,
                        help="seconds to wait before leaving the run to --attach (default: the whole timeout)")
    parser.add_argument("--attach", action="store_true", help="wait for the run a start left pending")
    parser.add_argument("cmd", nargs="*")
    args = parser.parse_args(argv)
    if not args.attach and (args.unit_file is None or not args.cmd):
        parser.error("a start needs --unit-file and a command after --")
    unit = f"{args.name}.service"
    path, out = RUN_DIR / unit, OUT_DIR / f"{args.name}.out"
    report: dict[str, object] = {"unit": unit, "source": str(args.unit_file or path), "rc": None}
    done = True
    try:
        if not args.attach:
            OUT_DIR.mkdir(mode=0o755, exist_ok=True)
            path.write_text(transient_unit(args.unit_file, args.name, args.cmd, args.timeout, out))
            systemctl("daemon-reload")
            started = systemctl("start", "--no-block", unit)
            report.update(start_rc=started.returncode, start_stderr=started.stderr.strip())
            if started.returncode != 0:
                raise OSError(f"systemctl start {unit}: {started.stderr.strip()}")
        elif not path.exists():
            raise OSError(f"{path} does not exist: no run to attach to")
        limit = args.timeout + 60 if args.attach or args.sync_limit is None else args.sync_limit
        done = wait_settled(lambda: show(unit, "Job", "ActiveState"), limit)
        if done:
            collect(unit, out, report)
        elif args.attach:
            raise OSError(f"{unit} still runs after {limit:.0f} s")
        else:
            report["pending"] = True
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        report["error"] = str(exc)
        done = True
    finally:
        if done:
            remove(unit, path, out)
    print(json.dumps(report))
    return 0 if report.get("pending") or (report["rc"] == 0 and "error" not in report) else 1


if __name__ == "__main__":
    sys.exit(main())
