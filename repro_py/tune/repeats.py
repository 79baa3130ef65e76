"""Repeated restarts (items 4 and 8 of :mod:`repro_py.tune.proposals`): the inventory's current config again, whose
restarts measure the between-restart noise, and the confirmations of leaders the run's confidence does not separate
from the winner so far."""

from __future__ import annotations

from repro_py.tune.noise import prob_greater
from repro_py.tune.objectives import Objective
from repro_py.tune.records import MEASURING, OK, Proposal, Record, RepeatedConfig
from repro_py.tune.search import Search


def reference_repeat(search: Search, remaining: int | None, per_config: int = 1) -> Proposal | None:
    """The reference's next restart, when it is due (see the module docstring): also when one more candidate
    (``per_config`` restarts at most) would leave too few restarts for it."""
    default = search.default
    first = None if default is None else search.records.get(default.label)
    if default is None or first is None or first.status != OK:
        return None
    done = len(search.reference_records())
    left = search.settings.reference_restarts - done
    if left <= 0:
        return None
    speculative = sum(1 for r in search.records.values() if r.cfg.spec.algorithm != "none" and r.restart == 1)
    due = speculative >= search.settings.init_design or (remaining is not None and remaining < left + per_config)
    if not due:
        return None
    number = next_reference_restart(search)
    return Proposal(
        RepeatedConfig.of(default, number),
        f"restart {number} of the inventory's current config {default.label}: the spread of its restarts "
        "measures the between-restart noise",
    )


def next_restart(records: list[Record]) -> int:
    """The number of a config's next restart, from its ``records``: one past the highest (a restart left out of
    the search, a flagged host's on a fleet, keeps its number)."""
    return max((r.restart for r in records), default=0) + 1


def next_reference_restart(search: Search) -> int:
    """The number of the reference's next restart."""
    return next_restart(search.reference_records())


def confirmation(
    search: Search, remaining: int | None, per_config: int = 1, *, stopping: bool = False
) -> Proposal | None:
    """A repeated restart of a leader, when one is due (see the module docstring): the search is ``stopping``, or
    the ``remaining`` restarts (None: the budget does not count restarts) cannot take a new candidate, which may
    take ``per_config``."""
    if len(search.confirmations()) >= search.settings.confirm_restarts:
        return None
    if not stopping and (remaining is None or remaining >= per_config):
        return None
    level = search.noise.confidence
    best: tuple[float, Objective, Record, str] | None = None
    for obj in search.settings.objectives:
        ranked = search.ranked(obj)
        if len(ranked) < 2 or any(r.status == MEASURING for r in search.restarts_of(ranked[0][0])):
            continue
        top, top_est = ranked[0]
        close = [(rec, est) for rec, est in ranked[1:] if prob_greater(top_est, est) < level]
        if not close:
            continue
        p = prob_greater(top_est, close[0][1])
        pick, _ = min([ranked[0], *close], key=lambda item: (len(search.restarts_of(item[0])), -item[1].mean))
        why = (
            f"the winner so far {top.label} ({top_est.text()} tok/s, {len(search.restarts_of(top))} restart(s)) is "
            f"ahead of {close[0][0].label} ({close[0][1].text()}) with probability {p:.0%}, below the {level:.0%} "
            f"asked; {len(close)} config(s) not separated from it"
        )
        if best is None or p < best[0]:
            best = (p, obj, pick, why)
    if best is None:
        return None
    _, obj, rec, why = best
    number = next_restart(search.restarts_of(rec))
    return Proposal(
        RepeatedConfig.of(rec.cfg, number),
        f"confirmation for {obj.key}: restart {number} of {rec.label}; {why}",
        obj.key,
    )
