"""CLI start-up: the CPU time of ``python -m repro_py.<command> --help``, as it is and with matplotlib imported first.

Every command the bundle starts pays its start-up: ``--help``, a plan, a dry run, a resume, and every command
the test suite starts. The report's plots import matplotlib when the first plot is drawn
(``repro_py.report.plots.pyplot``); the second column imports ``matplotlib.pyplot`` (Agg) before the command,
which is what the start-up cost while the plot modules imported it at their top. The runs alternate, so both
columns see the same machine. Prints per command the median user + system CPU seconds of each, and the ratio.

Usage::

    python benchmarks/cli_startup.py [--runs 5] [--commands sweep,tune,report]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: runs the command's module as ``python -m`` would, after an optional matplotlib import (argv[1]: "1" or "0")
_LAUNCH = (
    "import runpy, sys\n"
    "if sys.argv[1] == '1':\n"
    "    import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot\n"
    "mod = sys.argv[2]; sys.argv = [mod, '--help']\n"
    "try:\n"
    "    runpy.run_module(mod, run_name='__main__', alter_sys=True)\n"
    "except SystemExit:\n"
    "    pass\n"
)


def cpu_seconds(command: str, with_matplotlib: bool) -> float:
    """User + system CPU seconds of one start-up (the child process, waited for)."""
    before = os.times()
    subprocess.run([sys.executable, "-c", _LAUNCH, "1" if with_matplotlib else "0", f"repro_py.{command}"],
                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # fmt: skip
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--commands", default="sweep,tune,report")
    args = p.parse_args(argv)
    print(f"{'command':10s} {'as it is':>10s} {'matplotlib first':>17s} {'ratio':>7s}")
    for command in args.commands.split(","):
        lazy, eager = [], []
        for _ in range(args.runs):
            lazy.append(cpu_seconds(command, False))
            eager.append(cpu_seconds(command, True))
        a, b = statistics.median(lazy), statistics.median(eager)
        print(f"{command:10s} {a:9.2f}s {b:16.2f}s {a / b:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
