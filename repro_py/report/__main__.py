"""``python -m repro_py.report RUN_DIR``."""

import sys

from repro_py.report.cli import main

sys.exit(main())
