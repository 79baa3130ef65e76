"""``python -m repro_py.report RUN_DIR``: rebuild a run's report (and its manifest) from its result files.

Exit codes (:class:`repro_py.exitcodes.ExitCode`): 0 written; 2 the directory holds no run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from repro_py import manifest
from repro_py.exitcodes import ExitCode
from repro_py.report import tables
from repro_py.report.render import build_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m repro_py.report", description="Rebuild a sweep run's report from its result files."
    )
    parser.add_argument("run_dir", type=Path, help="results/<run-id>")
    parser.add_argument("--no-manifest", action="store_true", help="do not rewrite the run's MANIFEST.sha256")
    args = parser.parse_args(argv)
    run_dir: Path = args.run_dir
    if not (run_dir / "plan.json").is_file() and not (run_dir / "configs").is_dir():
        print(f"report: {run_dir} has neither plan.json nor configs/", file=sys.stderr)
        return ExitCode.USAGE
    paths = build_report(run_dir)
    for problem in tables.load_run(run_dir).refused:
        print(f"report: result refused (not counted): {problem}", file=sys.stderr)
    if not args.no_manifest:
        manifest.write(run_dir)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return ExitCode.OK


if __name__ == "__main__":
    raise SystemExit(main())
