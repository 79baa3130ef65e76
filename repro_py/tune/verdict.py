"""What the measurements say about the winners: against the runner-up, and against the current config.

A winner is the eligible config (full rung, gates passed, SLOs met) with the
highest mean. Against the runner-up, the relative difference ``(w - r) / w``
has an interval at the run's confidence, and the note says what it shows:

* ``ahead of R``: the interval is above zero;
* ``either is a sound choice``: the interval lies inside +-2% (``EQUIVALENCE_MARGIN``), so the two are
  shown to be that close (an equivalence test, not merely an overlap);
* ``not distinguishable from R``: anything else; the note says how much better the runner-up may be.

Against the inventory's current config (measured in every run, in two restarts
or more): the winner replaces it only when it is ahead with the run's
confidence (``P(winner > current) >= --confidence``), or when the current
config failed, garbled or broke an SLO.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from repro_py.tune.noise import Estimate, prob_greater
from repro_py.tune.objectives import Objective
from repro_py.tune.records import FAILED, GATES_FAIL
from repro_py.tune.search import Search

#: Two configs whose difference is shown (at the run's confidence) to be inside this band are interchangeable.
EQUIVALENCE_MARGIN = 0.02


@dataclasses.dataclass(frozen=True)
class Winner:
    objective: Objective
    label: str | None
    estimate: Estimate | None
    runner_up: str | None
    runner_up_estimate: Estimate | None
    confidence: float | None  # P(winner > runner-up)
    note: str

    @property
    def margin(self) -> float | None:
        if self.estimate is None or self.runner_up_estimate is None or self.estimate.mean <= 0:
            return None
        return (self.estimate.mean - self.runner_up_estimate.mean) / self.estimate.mean

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.key,
            "title": self.objective.title,
            "cell": {"context": self.objective.cell.context, "concurrency": self.objective.cell.concurrency},
            "label": self.label,
            "estimate": None if self.estimate is None else self.estimate.as_dict(),
            "runner_up": self.runner_up,
            "runner_up_estimate": None if self.runner_up_estimate is None else self.runner_up_estimate.as_dict(),
            "margin": self.margin,
            "confidence": self.confidence,
            "note": self.note,
        }


def difference(a: Estimate, b: Estimate) -> tuple[float, float, float]:
    """``(a - b) / a`` and its interval at the estimates' ``z``."""
    d = (a.mean - b.mean) / a.mean
    half = a.z * math.hypot(a.se, b.se) / a.mean
    return d, d - half, d + half


def runner_up_note(best: Estimate, runner: str, other: Estimate, confidence: float) -> str:
    _, low, high = difference(best, other)
    level = f"{confidence:.0%} confidence"
    if low > 0:
        return f"ahead of {runner} at {level} (by {low:.1%} to {high:.1%})"
    if low > -EQUIVALENCE_MARGIN and high < EQUIVALENCE_MARGIN:
        return (
            f"within {EQUIVALENCE_MARGIN:.0%} of {runner} at {level} (difference {low:+.1%} to {high:+.1%}): "
            "either is a sound choice"
        )
    return (
        f"not distinguishable from {runner} at {level}: the difference is {low:+.1%} to {high:+.1%}, so "
        f"{runner} may be up to {-low:.1%} better; more repeats or restarts of both would decide"
    )


def winner(search: Search, obj: Objective) -> Winner:
    ranked = search.ranked(obj)
    if not ranked:
        return Winner(
            obj, None, None, None, None, None, "no config reached full fidelity, passed every gate and met every SLO"
        )
    (best, best_est), rest = ranked[0], ranked[1:]
    if not rest:
        dropped = sum(1 for r in search.records.values() if r.dropped_at(obj.key))
        note = f"the only config measured at full fidelity that passed; {dropped} others were clearly behind"
        return Winner(obj, best.label, best_est, None, None, None, note)
    runner, runner_est = rest[0]
    note = runner_up_note(best_est, runner.label, runner_est, search.noise.confidence)
    return Winner(obj, best.label, best_est, runner.label, runner_est, prob_greater(best_est, runner_est), note)


def winners(search: Search) -> list[Winner]:
    """Per objective: the best eligible config and how it stands against the runner-up."""
    return [winner(search, obj) for obj in search.settings.objectives]


@dataclasses.dataclass(frozen=True)
class VersusCurrent:
    """The winner of one objective against the inventory's current config."""

    objective: Objective
    winner: str
    current: str | None
    replace: bool  # the evidence supports writing the winner back
    text: str
    probability: float | None = None  # P(winner > current)
    gain: float | None = None  # winner / current - 1
    current_estimate: Estimate | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.key,
            "title": self.objective.title,
            "winner": self.winner,
            "current": self.current,
            "replace": self.replace,
            "probability": self.probability,
            "gain": self.gain,
            "current_estimate": None if self.current_estimate is None else self.current_estimate.as_dict(),
            "text": self.text,
        }


def _not_qualified(search: Search, obj: Objective, label: str) -> str | None:
    """Why the current config cannot be the winner of ``obj`` (None: it can)."""
    rec = search.records[label]
    if search.eligible(rec, obj):
        return None
    if rec.status == FAILED:
        return f"it failed: {rec.failure}"
    if rec.gates == GATES_FAIL:
        return f"it failed the gates: {rec.gates_reason}"
    if rec.slo_failures:
        return "it broke an SLO: " + "; ".join(rec.slo_failures)
    where = rec.dropped_at(obj.key)
    if where is not None:
        return f"at {where[0]}: {where[1]}"
    return None if rec.gates is None else f"gates {rec.gates}"


def versus_current(search: Search, won: Winner) -> VersusCurrent | None:
    """How ``won`` compares with the inventory's current config, and whether that supports replacing it."""
    if won.label is None or won.estimate is None:
        return None
    obj, current = won.objective, search.default
    if current is None:
        return VersusCurrent(
            obj, won.label, None, False, "the inventory names no current config (sweep_default_config) to compare with"
        )
    if won.label == current.label:
        text = f"the inventory's current config {current.label} is the winner"
        return VersusCurrent(obj, won.label, current.label, False, text)
    rec = search.records.get(current.label)
    if rec is None or rec.status not in ("ok", FAILED):
        return VersusCurrent(
            obj,
            won.label,
            current.label,
            False,
            f"the inventory's current config {current.label} was not measured in this run: nothing to compare with",
        )
    why = _not_qualified(search, obj, current.label)
    if why is not None:
        text = f"the inventory's current config {current.label} does not qualify ({why}); the winner does"
        return VersusCurrent(obj, won.label, current.label, True, text)
    cur = search.final_estimate(rec, obj.key)
    assert cur is not None
    p, gain = prob_greater(won.estimate, cur), won.estimate.mean / cur.mean - 1.0
    restarts = len([r for r in search.reference_records() if search.estimate(r, search.settings.final.name, obj.key)])
    base = (
        f"{gain:+.1%} over the inventory's current config {current.label} ({cur.text()} tok/s at the full rung, "
        f"{restarts} restart{'s' if restarts != 1 else ''}); the winner is ahead with probability {p:.0%}"
    )
    level = search.noise.confidence
    if p >= level:
        return VersusCurrent(obj, won.label, current.label, True, f"{base} (>= {level:.0%})", p, gain, cur)
    return VersusCurrent(
        obj,
        won.label,
        current.label,
        False,
        f"{base}, below the {level:.0%} asked: the current config stays",
        p,
        gain,
        cur,
    )
