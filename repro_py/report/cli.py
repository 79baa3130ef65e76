"""``python -m repro_py.report RUN_DIR``: rebuild a run's report (and its manifest) from its result files.

A fleet sweep's run (``fleet.json`` in RUN_DIR) gets its fleet report: each class's report and ``fleet.md``
(:mod:`repro_py.report.fleet`).

Exit codes (:class:`repro_py.exitcodes.ExitCode`): 0 written; 2 the directory holds no run (or an unreadable
``fleet.json``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from repro_py import manifest
from repro_py.exitcodes import ExitCode
from repro_py.report import tables
from repro_py.report.fleet import FleetError, build_fleet_report, class_dirs, is_fleet_run
from repro_py.report.render import build_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m repro_py.report", description="Rebuild a sweep run's report from its result files."
    )
    parser.add_argument("run_dir", type=Path, help="results/<run-id>")
    parser.add_argument("--no-manifest", action="store_true", help="do not rewrite the run's MANIFEST.sha256")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    if is_fleet_run(run_dir):
        try:
            paths = build_fleet_report(run_dir)
            parts = class_dirs(run_dir)
        except FleetError as exc:
            print(f"report: {exc}", file=sys.stderr)
            return ExitCode.USAGE
    elif not (run_dir / "plan.json").is_file() and not (run_dir / "configs").is_dir():
        print(f"report: {run_dir} has neither fleet.json, plan.json nor configs/", file=sys.stderr)
        return ExitCode.USAGE
    else:
        paths, parts = build_report(run_dir), [run_dir]
    for part in parts:
        for problem in tables.load_run(part).refused:
            print(f"report: result refused (not counted): {problem}", file=sys.stderr)
    if not args.no_manifest:
        manifest.write(run_dir)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return ExitCode.OK


if __name__ == "__main__":
    raise SystemExit(main())
