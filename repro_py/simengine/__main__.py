"""``python -m repro_py.simengine``: a SIMULATED sglang 0.5.23 server with the same command line."""

from __future__ import annotations

import sys

from repro_py.simengine.cli import main

if __name__ == "__main__":
    sys.exit(main())
