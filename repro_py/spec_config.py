"""The one set of speculative-decoding parameter rules.

Used by the simulated engine's command line, the sweep planner and the
Ansible preflight (through ``plugins/action/ddtree_validate.py``), so a
configuration is accepted or refused with the same message everywhere.

Short keys (the playbook's extra vars and the sweep grid's keys):

``algorithm``  ``ddtree`` | ``dflash`` | ``none`` (autoregressive baseline)
``budget``     DDTree node budget, int 1..BUDGET_MAX (ddtree only)
``topk``       DDTree per-depth top-K cap, int 1..budget (ddtree only)
``window``     drafter sliding-window KV size, positive int, or None (full cache)
``block_size`` DFlash block size, one of BLOCK_SIZES (ddtree and dflash)

Every list of fields, and what an algorithm drops, is derived from :data:`FIELDS`
(:func:`fields_of`, :func:`keys_of`, :func:`dropped_keys`, :data:`SETTINGS`,
:data:`ROLE_VARS`); no other file spells one (``tests/layout/test_contract_lists.py``).

Integers may arrive as decimal strings (``-e budget=8`` gives ``"8"``);
booleans are refused wherever an integer is expected, and boolean options
must be real booleans, never strings such as ``"yes"``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Literal

Algorithm = Literal["ddtree", "dflash", "none"]
ALGORITHMS: tuple[Algorithm, ...] = ("ddtree", "dflash", "none")
BUDGET_MAX = 256
WINDOW_MAX = 1 << 20
BLOCK_SIZES: tuple[int, ...] = (8, 16)


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of a configuration and every name it goes by.

    ``key`` is the short key (extra var, grid key); ``role_var`` the role
    variable that holds the inventory's value; ``flag`` the engine's command-line
    flag; ``echo`` the ``/server_info`` key the server reports it under;
    ``label`` the format of its part of a run label; ``algorithms`` the
    algorithms that use it (for the others it is dropped: no flag, no label
    part, and the server must report it unset).
    """

    key: str
    role_var: str
    flag: str
    echo: str
    label: str
    algorithms: frozenset[str]


#: The contract: the one table flags, the expected echo, labels and the
#: per-algorithm drops are derived from (Python here; Ansible through
#: plugins/action/ddtree_validate.py; docs/architecture.md shows it).
FIELDS: tuple[Field, ...] = (
    Field("algorithm", "sglang_service_spec_algorithm", "--speculative-algorithm", "speculative_algorithm",
          "{}", frozenset({"ddtree", "dflash", "none"})),
    Field("budget", "sglang_service_ddtree_budget", "--speculative-ddtree-budget", "speculative_ddtree_budget",
          "b{}", frozenset({"ddtree"})),
    Field("topk", "sglang_service_ddtree_topk", "--speculative-ddtree-topk-cap", "speculative_ddtree_topk_cap",
          "t{}", frozenset({"ddtree"})),
    Field("window", "sglang_service_draft_window", "--speculative-draft-window-size", "speculative_draft_window_size",
          "w{}", frozenset({"ddtree", "dflash"})),
    Field("block_size", "sglang_service_block_size", "--speculative-dflash-block-size",
          "speculative_dflash_block_size", "bs{}", frozenset({"ddtree", "dflash"})),
)  # fmt: skip
FIELD_BY_KEY: dict[str, Field] = {f.key: f for f in FIELDS}
SHORT_KEYS: tuple[str, ...] = tuple(f.key for f in FIELDS)
#: The speculative settings: every field but the algorithm itself (``FIELDS[0]``), which every algorithm has.
SETTINGS: tuple[Field, ...] = FIELDS[1:]
#: The role variables of the short keys; the sweep refuses them as overrides.
ROLE_VARS: dict[str, str] = {f.key: f.role_var for f in FIELDS}
#: The short keys where a none word is a value, not "unset": ``algorithm=none`` is the baseline, ``window=none``
#: a full draft cache (the sweep grid reads the word as unset in every other key).
NONE_WORD_KEYS: frozenset[str] = frozenset({"algorithm", "window"})
#: The engine's name of the speculative algorithm: DDTree is DFLASH's tree mode
#: (patch 0002), so the server reports DFLASH for both.
ENGINE_ALGORITHM: dict[str, str | None] = {"ddtree": "DFLASH", "dflash": "DFLASH", "none": None}
#: How a message names the algorithm that uses a setting ("budget=8 is a DDTree setting").
ALGORITHM_TITLES: dict[str, str] = {"ddtree": "DDTree", "dflash": "DFlash", "none": "autoregressive"}
_NONE_WORDS = frozenset({"none", "null", "off", ""})
_INT_RE = re.compile(r"^[0-9]+$")


def fields_of(algorithm: str) -> tuple[Field, ...]:
    """The fields ``algorithm`` uses, in ``FIELDS`` order, the algorithm's own field first: each gets an engine
    flag, a label part and an echo value (``Field.algorithms``). Raises ValueError for an unknown algorithm."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is not allowed; allowed: {', '.join(ALGORITHMS)}")
    return tuple(f for f in FIELDS if algorithm in f.algorithms)


def keys_of(algorithm: str) -> tuple[str, ...]:
    """The short keys of :func:`fields_of` (``ddtree``: all five; ``none``: ``algorithm`` alone)."""
    return tuple(f.key for f in fields_of(algorithm))


def dropped_keys(algorithm: str) -> tuple[str, ...]:
    """The short keys ``algorithm`` does not use, in ``FIELDS`` order: no flag, no label part, reported unset by
    the server; :func:`validate` refuses a value for one, the action plugin leaves a role variable's value out."""
    used = keys_of(algorithm)
    return tuple(key for key in SHORT_KEYS if key not in used)


class SpecConfigError(ValueError):
    """One or more rule violations; ``problems`` lists each message."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    algorithm: Algorithm
    budget: int | None
    topk: int | None
    window: int | None
    block_size: int | None

    @property
    def verify_width(self) -> int:
        """Tokens per request in one target verify forward (D)."""
        if self.algorithm == "ddtree":
            assert self.budget is not None
            return self.budget + 1
        if self.algorithm == "dflash":
            assert self.block_size is not None
            return self.block_size
        return 1

    @property
    def label(self) -> str:
        """Stable, filesystem-safe name, e.g. ``ddtree-b8-t4-w2048-bs8`` (parts from ``FIELDS``)."""
        if self.algorithm == "none":
            return "baseline"
        parts: list[str] = [self.algorithm]
        for field in fields_of(self.algorithm)[1:]:
            value = getattr(self, field.key)
            parts.append(field.label.format("none" if value is None else value))
        return "-".join(parts)

    def as_short(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def parse_int(name: str, value: object, *, minimum: int, maximum: int) -> tuple[int | None, str | None]:
    """Return (int, None) or (None, message). Accepts ints and decimal strings, never bools."""
    if isinstance(value, bool):
        return None, f"{name}={value!r} is a boolean; an integer {minimum}..{maximum} is required"
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _INT_RE.match(value.strip()):
        number = int(value.strip())
    else:
        return None, f"{name}={value!r} is not an integer; an integer {minimum}..{maximum} is required"
    if not minimum <= number <= maximum:
        return None, f"{name}={number} is out of range; allowed {minimum}..{maximum}"
    return number, None


def parse_bool(name: str, value: object) -> tuple[bool | None, str | None]:
    """Only real booleans; ``"yes"``/``"true"`` strings are refused with the reason."""
    if isinstance(value, bool):
        return value, None
    return None, (
        f"{name}={value!r} is a {type(value).__name__}; a real boolean (true/false) is required "
        "(strings such as 'yes' or 'false' are refused: in YAML and -e key=value they are truthy text)"
    )


def _parse_window(value: object) -> tuple[int | None, str | None]:
    if value is None or (isinstance(value, str) and value.strip().lower() in _NONE_WORDS):
        return None, None
    number, err = parse_int("window", value, minimum=1, maximum=WINDOW_MAX)
    if err:
        return None, f"{err} (or none for a full draft cache)"
    return number, None


def validate(
    raw: Mapping[str, object],
    *,
    drafter_block_size: int | None = None,
    allow_block_mismatch: bool = False,
) -> SpecConfig:
    """Validate short keys into a SpecConfig or raise SpecConfigError naming every bad value.

    The algorithm's fields (:func:`keys_of`) are parsed; a value for one it drops (:func:`dropped_keys`) is refused.

    ``drafter_block_size`` is the block size in the drafter's own config.json
    when known; a different ``block_size`` is refused unless
    ``allow_block_mismatch`` (the drafter is out of distribution beyond the
    block it was trained at).
    """
    problems: list[str] = []
    unknown = sorted(set(raw) - set(SHORT_KEYS))
    if unknown:
        problems.append(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(SHORT_KEYS)}")

    algo_raw = raw.get("algorithm", "ddtree")
    algo = str(algo_raw).strip().lower() if isinstance(algo_raw, str) else algo_raw
    if algo not in ALGORITHMS:
        problems.append(f"algorithm={algo_raw!r} is not allowed; allowed: {', '.join(ALGORITHMS)}")
        raise SpecConfigError(problems)
    algorithm: Algorithm = algo
    used = keys_of(algorithm)
    budget = topk = window = block_size = None
    if "window" in used:
        window, err = _parse_window(raw.get("window"))
        if err:
            problems.append(err)
    if "block_size" in used:
        block_size = _parse_block(raw.get("block_size", 8), problems, drafter_block_size, allow_block_mismatch)
    if window is not None and block_size is not None and window < block_size:
        # sglang 0.5.23's _handle_dflash refuses this at startup.
        problems.append(
            f"window={window} is smaller than block_size={block_size}; "
            "the draft window must hold at least one block (window >= block_size)"
        )
    problems += [_dropped(key, raw[key], algorithm) for key in dropped_keys(algorithm) if raw.get(key) is not None]
    if "budget" in used:
        budget = _parse_budget(raw.get("budget"), algorithm, problems)
    if "topk" in used:
        topk = _parse_topk(raw.get("topk"), algorithm, budget, problems)
    if problems:
        raise SpecConfigError(problems)
    return SpecConfig(algorithm=algorithm, budget=budget, topk=topk, window=window, block_size=block_size)


def _dropped(key: str, value: object, algorithm: str) -> str:
    """Why a value for ``key`` is refused: ``algorithm`` does not use it (``Field.algorithms``)."""
    if algorithm == "none":
        return f"{key}={value!r} is set but algorithm=none (the autoregressive baseline) takes no speculative settings"
    users = [a for a in ALGORITHMS if a in FIELD_BY_KEY[key].algorithms]
    titles = "/".join(ALGORITHM_TITLES[a] for a in users)
    return f"{key}={value!r} is a {titles} setting but algorithm={algorithm}; use " + " or ".join(
        f"algorithm={a}" for a in users
    )


def _parse_block(
    value: object, problems: list[str], drafter_block_size: int | None, allow_block_mismatch: bool
) -> int | None:
    """``block_size``: one of BLOCK_SIZES, and the drafter's trained block unless a mismatch is allowed."""
    bs, err = parse_int("block_size", value, minimum=1, maximum=64)
    if err:
        problems.append(f"{err.split(';')[0]}; allowed: {', '.join(map(str, BLOCK_SIZES))}")
        return None
    if bs not in BLOCK_SIZES:
        problems.append(f"block_size={bs} is not allowed; allowed: {', '.join(map(str, BLOCK_SIZES))}")
        return None
    mismatch = block_mismatch(bs, drafter_block_size, allow_block_mismatch)
    if mismatch:
        problems.append(mismatch)
    return bs


def block_mismatch(block_size: int | None, drafter_block_size: int | None, allow_block_mismatch: bool) -> str | None:
    """Why ``block_size`` is refused beside the drafter's trained block size, or None (same size, either unknown,
    or a mismatch allowed)."""
    if block_size is None or drafter_block_size is None or block_size == drafter_block_size or allow_block_mismatch:
        return None
    return (
        f"block_size={block_size} differs from the drafter's trained block size {drafter_block_size} "
        "(config.json); the drafter is out of distribution beyond its trained block. "
        "Set allow_block_mismatch=true to run it anyway"
    )


def drafter_block_size(drafter_config: Mapping[str, object]) -> int | None:
    """The drafter's trained block size from its config.json, read as sglang 0.5.23 reads it (speculative/
    dflash_utils.py parse_dflash_draft_config): ``dflash_config.block_size``, else a top-level ``block_size``;
    None when neither is there. Raises SpecConfigError for a value that is not an integer >= 1."""
    dflash = drafter_config.get("dflash_config")
    if isinstance(dflash, Mapping) and "block_size" in dflash:
        raw, where = dflash["block_size"], "dflash_config.block_size"
    else:
        raw, where = drafter_config.get("block_size"), "block_size"
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise SpecConfigError([f"{where}={raw!r} in the drafter's config.json must be an integer >= 1"])
    return raw


def _parse_budget(value: object, algorithm: str, problems: list[str]) -> int | None:
    if value is None:
        problems.append(f"budget is required for algorithm={algorithm}; allowed 1..{BUDGET_MAX}")
        return None
    budget, err = parse_int("budget", value, minimum=1, maximum=BUDGET_MAX)
    if err:
        problems.append(err)
    return budget


def _parse_topk(value: object, algorithm: str, budget: int | None, problems: list[str]) -> int | None:
    """``topk``: 1..budget (1..BUDGET_MAX while the budget is unknown, so its own problems are still named)."""
    if value is None:
        problems.append(f"topk is required for algorithm={algorithm}; allowed 1..budget")
        return None
    if budget is None:
        _, err = parse_int("topk", value, minimum=1, maximum=BUDGET_MAX)
        if err:
            problems.append(err)
        return None
    topk, err = parse_int("topk", value, minimum=1, maximum=budget)
    if err:
        problems.append(err.replace("out of range", f"out of range (topk must be <= budget={budget})"))
    return topk


def fault_suffix(faults: Sequence[str] | str | None) -> str:
    """The label part of simulated faults: ``["crash-after:20"]`` -> ``-fault-crash-after-20``.

    Every character that is not a letter or digit becomes ``-``; several faults
    (a list, or one comma-separated string) are joined with ``-``.
    """
    if faults is None:
        return ""
    items = [faults] if isinstance(faults, str) else list(faults)
    words = ["".join(c if c.isalnum() else "-" for c in str(f).strip()).strip("-") for f in items]
    words = [w for w in words if w]
    return "-fault-" + "-".join(words) if words else ""


def run_label(cfg: SpecConfig, faults: Sequence[str] | str | None = None) -> str:
    """The run label of a config with its simulated faults: the sweep's, the role's and the report's name."""
    return cfg.label + fault_suffix(faults)


def to_engine_flags(cfg: SpecConfig, *, drafter_path: str | None) -> list[str]:
    """The speculative part of an sglang (or simulated engine) command line (flags from ``FIELDS``)."""
    if cfg.algorithm == "none":
        return []
    flags = [FIELD_BY_KEY["algorithm"].flag, "DDTREE" if cfg.algorithm == "ddtree" else "DFLASH"]
    if drafter_path:
        flags += ["--speculative-draft-model-path", drafter_path]
    for field in fields_of(cfg.algorithm)[1:]:
        value = getattr(cfg, field.key)
        if value is not None:
            flags += [field.flag, str(value)]
    return flags


def expected_echo(cfg: SpecConfig) -> dict[str, object]:
    """What ``/server_info`` must report for ``cfg``: every field's echo key, ``None`` where the
    algorithm does not use it (a DFLASH chain has no tree budget; a baseline no speculation)."""
    echo: dict[str, object] = {FIELD_BY_KEY["algorithm"].echo: ENGINE_ALGORITHM[cfg.algorithm]}
    if cfg.algorithm == "none":
        return echo  # an autoregressive server has no other speculative setting to compare
    for field in SETTINGS:
        echo[field.echo] = getattr(cfg, field.key) if cfg.algorithm in field.algorithms else None
    return echo


MISSING = "<missing>"


def echo_normal(value: object) -> object:
    """Decimal strings compare as ints; an empty string as unset."""
    if isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return int(value)
        if value == "":
            return None
    return value


def echo_differences(
    reported: Mapping[str, object], expected: Mapping[str, object]
) -> list[tuple[str, object, object]]:
    """The one config-echo comparison: ``(key, expected, reported)`` for each key the server
    reports differently (``MISSING`` when it does not report it), in key order.

    Used by the sweep's gate (``repro_py.gates.echo``) and, with ``expected``
    from ``expected_echo`` through the action plugin, by the role's readiness
    check, whose host-side module compares the same way (a test runs both on
    the same cases).
    """
    out = []
    for key, want in sorted(expected.items()):
        got = reported.get(key, MISSING)
        if echo_normal(got) != echo_normal(want):
            out.append((key, want, got))
    return out
