"""``python -m repro_py.bench``: see ``repro_py.bench.cli``."""

from __future__ import annotations

import sys

from repro_py.bench.cli import main

sys.exit(main(sys.argv[1:]))
