"""Parse a command line into arguments or the exit code argparse chose (``main(argv) -> int`` never raises)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from repro_py.exitcodes import ExitCode


def parse_or_exit_code(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """The parsed arguments; or, where argparse would exit (``--help``: 0, a bad argument: 2), that exit code."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else int(ExitCode.USAGE)
