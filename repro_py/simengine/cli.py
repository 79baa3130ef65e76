"""``python -m repro_py.simengine``: the SIMULATED sglang 0.5.23 server (DFlash + DDTree), with sglang's flags
(:mod:`repro_py.simengine.flags`) resolved and refused as sglang does (:mod:`repro_py.simengine.launch_settings`).

A refused command line exits 2 with a message naming the flag and value,
before anything is loaded, as a real server refuses to start.
"""

from __future__ import annotations

import sys

from repro_py.exitcodes import ExitCode
from repro_py.simengine.launch_settings import resolve
from repro_py.simengine.model_dirs import CliError


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m repro_py.simengine``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = resolve(argv)
    except SystemExit as exc:  # argparse already printed usage and the error
        code = exc.code
        return int(code) if isinstance(code, int) else int(ExitCode.USAGE)
    except CliError as exc:
        print(f"[SIMULATED] error: {exc}", file=sys.stderr)
        print(f"ValueError: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    from repro_py.simengine.lifecycle import run  # noqa: PLC0415 - aiohttp is imported only to serve

    return run(settings)
