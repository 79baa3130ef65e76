"""What the collection's controller-side plugins take from the repro-py Python package.

The action plugins apply the bundle's configuration contract (``repro_py.spec_config``: the one set of DDTree
parameter rules the sweep planner and the simulated engine use too) and its atomic writes. That package lives on
the controller beside ansible-core (``pip install <the bundle's repository>``; a checkout's ``make venv`` makes it
importable); it is imported as any library is, when a plugin first uses it, and its absence is said with the fix,
not as a bare ImportError.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ansible.errors import AnsibleError

INSTALL_HINT = (
    "the ddtree.sglang collection's action plugins need the repro-py Python package on the controller, in the "
    "Python that runs ansible-playbook: pip install <the sglang-ddtree repository> (a checkout: make venv)"
)


def require_repro_py(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for a module of repro-py; an :class:`AnsibleError` naming the package and
    how to install it when it is missing."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name == "repro_py" or exc.name.startswith("repro_py.")):
            raise AnsibleError(f"{INSTALL_HINT} (import of {name} failed: {exc})") from exc
        raise


class LazyRepro:
    """A module of repro-py imported at its first use, not when the plugin is loaded (``ansible-doc`` and the
    collection's import checks load plugins where no controller package is installed)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if self._module is None:
            self._module = require_repro_py(self._name)
        return getattr(self._module, attr)


def plain(value: object) -> object:
    """Strip ansible-core's tagged subclasses (2.19+) so messages name plain types."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
