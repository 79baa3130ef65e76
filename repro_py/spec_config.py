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
#: The role variables of the short keys; the sweep refuses them as overrides.
ROLE_VARS: dict[str, str] = {f.key: f.role_var for f in FIELDS}
#: The engine's name of the speculative algorithm: DDTree is DFLASH's tree mode
#: (patch 0002), so the server reports DFLASH for both.
ENGINE_ALGORITHM: dict[str, str | None] = {"ddtree": "DFLASH", "dflash": "DFLASH", "none": None}
_NONE_WORDS = frozenset({"none", "null", "off", ""})
_INT_RE = re.compile(r"^[0-9]+$")


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
        for field in FIELDS[1:]:
            if self.algorithm in field.algorithms:
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

    budget: int | None = None
    topk: int | None = None
    window: int | None = None
    block_size: int | None = None

    if algorithm == "none":
        for key in ("budget", "topk", "window", "block_size"):
            if raw.get(key) is not None:
                problems.append(
                    f"{key}={raw[key]!r} is set but algorithm=none "
                    "(the autoregressive baseline) takes no speculative settings"
                )
    else:
        window, err = _parse_window(raw.get("window"))
        if err:
            problems.append(err)
        bs_raw = raw.get("block_size", 8)
        bs, err = parse_int("block_size", bs_raw, minimum=1, maximum=64)
        if err:
            problems.append(f"{err.split(';')[0]}; allowed: {', '.join(map(str, BLOCK_SIZES))}")
        elif bs not in BLOCK_SIZES:
            problems.append(f"block_size={bs} is not allowed; allowed: {', '.join(map(str, BLOCK_SIZES))}")
        else:
            block_size = bs
            if drafter_block_size is not None and bs != drafter_block_size and not allow_block_mismatch:
                problems.append(
                    f"block_size={bs} differs from the drafter's trained block size {drafter_block_size} "
                    "(config.json); the drafter is out of distribution beyond its trained block. "
                    "Set allow_block_mismatch=true to run it anyway"
                )
        if window is not None and block_size is not None and window < block_size:
            # sglang 0.5.23's _handle_dflash refuses this at startup.
            problems.append(
                f"window={window} is smaller than block_size={block_size}; "
                "the draft window must hold at least one block (window >= block_size)"
            )
        if algorithm == "dflash":
            for key in ("budget", "topk"):
                if raw.get(key) is not None:
                    problems.append(
                        f"{key}={raw[key]!r} is a DDTree setting but algorithm=dflash; use algorithm=ddtree"
                    )
        else:
            if raw.get("budget") is None:
                problems.append(f"budget is required for algorithm=ddtree; allowed 1..{BUDGET_MAX}")
            else:
                budget, err = parse_int("budget", raw["budget"], minimum=1, maximum=BUDGET_MAX)
                if err:
                    problems.append(err)
            topk_raw = raw.get("topk")
            if topk_raw is None:
                problems.append("topk is required for algorithm=ddtree; allowed 1..budget")
            elif budget is not None:
                topk, err = parse_int("topk", topk_raw, minimum=1, maximum=budget)
                if err:
                    problems.append(err.replace("out of range", f"out of range (topk must be <= budget={budget})"))
            else:
                _, err = parse_int("topk", topk_raw, minimum=1, maximum=BUDGET_MAX)
                if err:
                    problems.append(err)
    if problems:
        raise SpecConfigError(problems)
    return SpecConfig(algorithm=algorithm, budget=budget, topk=topk, window=window, block_size=block_size)


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
    for field in FIELDS[1:]:
        value = getattr(cfg, field.key)
        if cfg.algorithm in field.algorithms and value is not None:
            flags += [field.flag, str(value)]
    return flags


def expected_echo(cfg: SpecConfig) -> dict[str, object]:
    """What ``/server_info`` must report for ``cfg``: every field's echo key, ``None`` where the
    algorithm does not use it (a DFLASH chain has no tree budget; a baseline no speculation)."""
    echo: dict[str, object] = {FIELD_BY_KEY["algorithm"].echo: ENGINE_ALGORITHM[cfg.algorithm]}
    if cfg.algorithm == "none":
        return echo  # an autoregressive server has no other speculative setting to compare
    for field in FIELDS[1:]:
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
