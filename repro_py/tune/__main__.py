"""``python -m repro_py.tune INVENTORY --objective OBJ ...``."""

import sys

from repro_py.tune.cli import main

sys.exit(main())
