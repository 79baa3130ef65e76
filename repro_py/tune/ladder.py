"""The fidelity ladder and the rule that decides, rung by rung, whether a config goes on.

A restart dominates the cost of a measurement (6-11 minutes of loading on the
field hosts, against seconds to a few minutes of benchmark), so a config is
carried up the ladder *while the engine still runs it*: screen it with short
outputs, and only if it is not clearly behind, measure it longer, then fully
with repeats and the correctness gates, all in the same restart. Classic
successive halving would promote survivors in a later round, paying a second
(and third) restart for each; here a promotion costs only the extra
benchmark time. The decision at each rung compares the config with the other
configs measured at that same rung (same cell, output length and repeats):
it stops only when its interval is entirely below the best lower bound there
(``clearly behind``), so noise alone does not drop a contender.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from repro_py.tune.noise import Estimate

DEFAULT_FULL_TOKENS = 512
DEFAULT_FULL_REPEATS = 3
DEFAULT_SCREEN_TOKENS = 64
DEFAULT_SCREEN_REPEATS = 3


class LadderError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Rung:
    name: str
    max_tokens: int
    repeats: int

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "max_tokens": self.max_tokens, "repeats": self.repeats}


def make_ladder(
    *,
    full_tokens: int = DEFAULT_FULL_TOKENS,
    full_repeats: int = DEFAULT_FULL_REPEATS,
    screen_tokens: int = DEFAULT_SCREEN_TOKENS,
    screen_repeats: int = DEFAULT_SCREEN_REPEATS,
) -> tuple[Rung, ...]:
    """screen -> (confirm, when there is room between the two lengths) -> full."""
    problems = [
        f"{name}={value} must be >= 1"
        for name, value in (
            ("--max-tokens", full_tokens),
            ("--repeats", full_repeats),
            ("--screen-tokens", screen_tokens),
            ("--screen-repeats", screen_repeats),
        )
        if value < 1
    ]
    if not problems and screen_tokens > full_tokens:
        problems.append(f"--screen-tokens {screen_tokens} must not exceed --max-tokens {full_tokens}")
    if problems:
        raise LadderError("; ".join(problems))
    rungs = [Rung("screen", screen_tokens, screen_repeats)]
    middle = round((screen_tokens * full_tokens) ** 0.5)
    if screen_tokens * 2 <= middle <= full_tokens // 2:
        rungs.append(Rung("confirm", middle, max(2, min(screen_repeats, full_repeats))))
    if (full_tokens, full_repeats) != (screen_tokens, screen_repeats):
        rungs.append(Rung("full", full_tokens, full_repeats))
    else:
        rungs[-1] = Rung("full", full_tokens, full_repeats)
    return tuple(rungs)


@dataclasses.dataclass(frozen=True)
class Verdict:
    keep: bool
    reason: str


def race(own: Estimate, others: Sequence[tuple[str, Estimate]], unit: str = "tok/s") -> Verdict:
    """Go on unless ``own``'s interval is entirely below the best lower bound among ``others``."""
    if not others:
        return Verdict(True, "first at this rung")
    leader, best = max(others, key=lambda item: item[1].low)
    if own.high < best.low:
        return Verdict(
            False,
            f"clearly behind {leader}: {own.text()} {unit} (upper {own.high:.1f}) < its lower bound {best.low:.1f}",
        )
    return Verdict(True, f"not clearly behind {leader} ({own.text()} vs {best.text()} {unit})")
