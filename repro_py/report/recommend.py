"""Winner per objective, subject to the gates.

A config is eligible only when it finished (``status == "ok"``) and every
gate passed; a config that is fast but garbles, fails the coding eval or does
not echo its settings never wins. Within an objective the highest median
figure wins; when the runner-up is within the measured spread (twice the
larger coefficient of variation) the note says so, and a noisy winner cell is
flagged. Configs measured at different simulated speeds (``sim_speed``) are
not compared: when the eligible configs span several, no winner is picked and
the note says why. Neither are configs measured at different sampling settings
(temperature, top_p): each setting gets its own winners. Nor, in a fleet sweep, configs
measured on hosts of different hardware classes (``host_class``): each class is its own
sweep, and its figures are corrected by each host's offset before they are ranked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from repro_py.simmark import speed_text


@dataclasses.dataclass(frozen=True)
class Objective:
    key: str
    title: str
    metric: str
    cv: str
    unit: str
    cell: str


OBJECTIVES: tuple[Objective, ...] = (
    Objective(
        "single_stream",
        "single-stream latency",
        "single_stream_tps",
        "single_stream_cv",
        "tok/s",
        "lowest concurrency, shortest context",
    ),
    Objective(
        "throughput",
        "throughput at high concurrency",
        "aggregate_tps",
        "aggregate_cv",
        "tok/s",
        "highest concurrency, shortest context",
    ),
    Objective(
        "long_context",
        "long context",
        "long_context_tps",
        "long_context_cv",
        "tok/s",
        "lowest concurrency, longest context",
    ),
)


@dataclasses.dataclass
class Winner:
    objective: Objective
    label: str | None
    value: float | None
    runner_up: str | None
    runner_up_value: float | None
    eligible: int
    excluded: list[str]
    note: str
    #: the sampling setting the figures were measured at (``T=0 (greedy), top_p=1``)
    sampling: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "sampling": self.sampling,
            "objective": self.objective.key,
            "title": self.objective.title,
            "label": self.label,
            "value": self.value,
            "runner_up": self.runner_up,
            "runner_up_value": self.runner_up_value,
            "eligible": self.eligible,
            "excluded": self.excluded,
            "note": self.note,
        }


def _value(row: Mapping[str, Any], key: str) -> float | None:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _mixed_classes(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The host classes of ``rows``, listed, when there are several (a row with no host counts as one of its own:
    a one-host sweep's figures are no more comparable with a fleet class's); None when they are of one class."""
    classes = {str(row["host_class"]) if row.get("host_class") else None for row in rows if row.get("host")}
    if any(not row.get("host") for row in rows) and classes:
        classes.add("no host class")
    named = sorted(c for c in classes if c is not None) + (["unknown class"] if None in classes else [])
    return ", ".join(named) if len(named) > 1 else None


def pick(objective: Objective, table: Sequence[Mapping[str, Any]]) -> Winner:
    eligible: list[tuple[float, Mapping[str, Any]]] = []
    excluded: list[str] = []
    for row in table:
        value = _value(row, objective.metric)
        if row.get("status") != "ok":
            excluded.append(f"{row.get('label')} ({row.get('failure_class')})")
            continue
        if not row.get("gates_passed"):
            why = "gates not run" if row.get("gates_state") == "not run" else "gates"
            excluded.append(f"{row.get('label')} ({why})")
            continue
        if value is None:
            excluded.append(f"{row.get('label')} (no {objective.cell} figure)")
            continue
        eligible.append((value, row))
    if not eligible:
        return Winner(objective, None, None, None, None, 0, excluded, "no config passed the gates with this figure")
    speeds = sorted({_value(row, "sim_speed") for _, row in eligible}, key=lambda v: -1.0 if v is None else v)
    if len(speeds) > 1:
        listed = ", ".join(speed_text(v) for v in speeds)
        note = f"no winner: eligible configs ran at different sim speeds ({listed}); their figures are not comparable"
        return Winner(objective, None, None, None, None, len(eligible), excluded, note)
    mixed = _mixed_classes([row for _, row in eligible])
    if mixed:
        why = f"eligible configs ran on hosts of different classes ({mixed})"
        note = f"no winner: {why}; their figures are not comparable"
        return Winner(objective, None, None, None, None, len(eligible), excluded, note)
    eligible.sort(key=lambda item: item[0], reverse=True)
    best_v, best = eligible[0]
    notes: list[str] = []
    runner_label: str | None = None
    runner_v: float | None = None
    if len(eligible) > 1:
        runner_v, runner = eligible[1]
        runner_label = str(runner.get("label"))
        cv = max(_value(best, objective.cv) or 0.0, _value(runner, objective.cv) or 0.0)
        margin = (best_v - runner_v) / best_v if best_v > 0 else 0.0
        if margin <= 2 * cv:
            notes.append(f"within measured spread of {runner_label} (margin {margin:.1%}, CV up to {cv:.1%})")
        else:
            notes.append(f"{margin:.1%} ahead of {runner_label}")
    if (_value(best, objective.cv) or 0.0) > 0.05:
        notes.append("winner's cell is noisy (CV > 5%)")
    return Winner(
        objective,
        str(best.get("label")),
        best_v,
        runner_label,
        runner_v,
        len(eligible),
        excluded,
        "; ".join(notes),
    )


def recommend(table: Sequence[Mapping[str, Any]]) -> list[Winner]:
    """The winners per objective, for each sampling setting of the table in turn (greedy first)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in table:
        groups.setdefault(str(row.get("sampling") or ""), []).append(row)

    def order(item: tuple[str, list[Mapping[str, Any]]]) -> tuple[float, float]:
        first = item[1][0]
        return (_value(first, "temperature") or 0.0, _value(first, "top_p") or 1.0)

    winners: list[Winner] = []
    for sampling, rows in sorted(groups.items(), key=order) or [("", [])]:
        for objective in OBJECTIVES:
            winner = pick(objective, rows)
            winner.sampling = sampling
            winners.append(winner)
    return winners
