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
from collections.abc import Mapping
from typing import Literal

Algorithm = Literal["ddtree", "dflash", "none"]
ALGORITHMS: tuple[Algorithm, ...] = ("ddtree", "dflash", "none")
BUDGET_MAX = 256
WINDOW_MAX = 1 << 20
BLOCK_SIZES: tuple[int, ...] = (8, 16)
SHORT_KEYS: tuple[str, ...] = ("algorithm", "budget", "topk", "window", "block_size")
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
        """Stable, filesystem-safe name, e.g. ``ddtree-b8-t4-w2048-bs8``."""
        if self.algorithm == "none":
            return "baseline"
        win = "wnone" if self.window is None else f"w{self.window}"
        if self.algorithm == "dflash":
            return f"dflash-{win}-bs{self.block_size}"
        return f"ddtree-b{self.budget}-t{self.topk}-{win}-bs{self.block_size}"

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


def to_engine_flags(cfg: SpecConfig, *, drafter_path: str | None) -> list[str]:
    """The speculative part of an sglang (or simulated engine) command line."""
    if cfg.algorithm == "none":
        return []
    flags = ["--speculative-algorithm", "DDTREE" if cfg.algorithm == "ddtree" else "DFLASH"]
    if drafter_path:
        flags += ["--speculative-draft-model-path", drafter_path]
    flags += ["--speculative-dflash-block-size", str(cfg.block_size)]
    if cfg.algorithm == "ddtree":
        flags += ["--speculative-ddtree-budget", str(cfg.budget), "--speculative-ddtree-topk-cap", str(cfg.topk)]
    if cfg.window is not None:
        flags += ["--speculative-draft-window-size", str(cfg.window)]
    return flags
