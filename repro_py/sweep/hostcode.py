"""The collection's stdlib host helpers, imported on the controller from the same files Ansible ships to the hosts.

The failure classifier (``sglang_failure``) and the host lease rules (``sglang_lease``) run on the host inside the
collection's modules and on the controller in the sweep; one file each, so the two never disagree. The same holds
for the patch series' digest (``sglang_patch_files``). They are the collection's public ``plugins/module_utils``,
imported by their collection name (``ansible_collections.ddtree.sglang.plugins.module_utils.<name>``): a checkout
puts its ``.collections`` on the path (``make venv``), an installed collection is found where it is installed.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from types import ModuleType

PACKAGE = "ansible_collections.ddtree.sglang.plugins.module_utils"


@functools.cache
def load(name: str) -> ModuleType:
    """The collection's ``plugins/module_utils/<name>.py`` (stdlib only, so it imports anywhere)."""
    return importlib.import_module(f"{PACKAGE}.{name}")


def explain_failure(state: str, journal: Sequence[str]) -> str:
    """The cause found in ``journal`` in plain words, then ``state`` as detail."""
    return str(load("sglang_failure").explain(state, list(journal)))
