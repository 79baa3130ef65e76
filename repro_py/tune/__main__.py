"""``python -m repro_py.tune INVENTORY --objective OBJ ...``."""

import sys

from repro_py.blasthreads import one_blas_thread

one_blas_thread()  # before numpy loads (repro_py.blasthreads)

from repro_py.tune.cli import main  # noqa: E402

sys.exit(main())
