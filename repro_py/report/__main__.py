"""``python -m repro_py.report RUN_DIR``."""

import sys

from repro_py.report.render import main

sys.exit(main())
