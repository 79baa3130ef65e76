"""``python -m repro_py.gates``: see ``repro_py.gates.cli``."""

from __future__ import annotations

import sys

from repro_py.gates.cli import main

sys.exit(main(sys.argv[1:]))
