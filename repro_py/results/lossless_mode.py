"""The lossless-restart mode as a run's files record it: its values, the option that sets it, the label of a
figure measured under deterministic inference, and the mode a stored ``plan.json`` names.

The sweep chooses the mode and says what follows from it (:mod:`repro_py.sweep.lossless_restart`); the report
reads it back from the files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SEPARATE = "separate"
SHARED = "shared"
MODES = (SEPARATE, SHARED)
FLAG = "--lossless-restart"
#: what a figure measured under deterministic inference is labelled with
DETERMINISTIC_LABEL = "deterministic inference"


def stored_mode(plan: Mapping[str, Any]) -> str | None:
    """The mode a stored ``plan.json`` was run with (None: planned before the option existed)."""
    block = plan.get("lossless_restart")
    mode = block.get("mode") if isinstance(block, Mapping) else None
    return str(mode) if mode is not None else None
