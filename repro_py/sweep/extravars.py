"""Extra vars a sweep passes to its plays: the CLI's ``--extra-var`` (every config) and a grid
entry's ``extra_vars:`` (that config only), checked by the same rules.

Refused: the config's own keys (short keys, ``sim_fault``) and the role variables behind them
(they would set a config value behind the plan's back), and the variables the sweep sets itself
(the report path, its host lease, deterministic inference for every config it measures).
"""

from __future__ import annotations

from collections.abc import Mapping

from repro_py.spec_config import ROLE_VARS, SHORT_KEYS

SIM_FAULT_KEY = "sim_fault"
#: A grid entry's key for per-config extra vars.
GRID_KEY = "extra_vars"
#: The losslessness gate's oracle needs deterministic inference on the baseline and on every config under test:
#: the sweep turns it on for each config it measures (not for the final restore, which keeps the inventory's).
DETERMINISTIC_VAR = "sglang_service_deterministic_inference"
SET_BY_SWEEP = frozenset({
    "sglang_service_report_path", "sglang_service_lease_id", "sglang_service_lease_holder", DETERMINISTIC_VAR,
})
_RESERVED_SHORT = frozenset({*SHORT_KEYS, SIM_FAULT_KEY, GRID_KEY})
#: The role variables behind the config's keys.
_RESERVED_LONG = {**{var: key for key, var in ROLE_VARS.items()}, "sglang_service_sim_faults": SIM_FAULT_KEY}


def problem(key: str, where: str) -> str | None:
    """Why ``key`` may not be an extra var (``where`` names the source), or None."""
    if not key.isidentifier():
        return f"{where} {key!r}: not a variable name"
    if key in _RESERVED_SHORT or key in SET_BY_SWEEP:
        return f"{where} {key}: set by the sweep per config (use the grid)"
    if key in _RESERVED_LONG:
        short = _RESERVED_LONG[key]
        return (
            f"{where} {key}: the role variable of the config key {short!r}, set by the sweep "
            f"per config; put {short} in the grid (or in the inventory for every config)"
        )
    return None


def check_mapping(value: object, where: str) -> tuple[dict[str, object], list[str]]:
    """A grid entry's ``extra_vars`` mapping, with every problem found."""
    if not isinstance(value, Mapping):
        return {}, [f"{where}: expected a mapping of variable -> value, got {type(value).__name__}: {value!r}"]
    out: dict[str, object] = {}
    problems: list[str] = []
    for key, item in value.items():
        why = problem(str(key), where)
        if why is None:
            out[str(key)] = item
        else:
            problems.append(why)
    return out, problems
