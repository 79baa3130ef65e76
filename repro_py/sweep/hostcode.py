"""The role's stdlib host helpers, loaded on the controller from the same files Ansible ships.

The failure classifier (``sglang_failure``) and the host lease rules
(``sglang_lease``) run on the host inside the role's modules and on the
controller in the sweep; one file each, so the two never disagree.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULE_UTILS = Path(__file__).resolve().parents[2] / "roles" / "sglang_service" / "module_utils"


@functools.cache
def load(name: str) -> ModuleType:
    """``roles/sglang_service/module_utils/<name>.py`` as a module (stdlib only, so it imports anywhere)."""
    path = MODULE_UTILS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_sglang_hostcode_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def explain_failure(state: str, journal: Sequence[str]) -> str:
    """The cause found in ``journal`` in plain words, then ``state`` as detail."""
    return str(load("sglang_failure").explain(state, list(journal)))
