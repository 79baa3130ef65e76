"""``python -m repro_py.sweep``."""

import sys

from repro_py.sweep.cli import main

sys.exit(main())
