"""What the tuner prints on the console: the plan before the first restart, the winners at the end."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from repro_py.tune import verdict
from repro_py.tune.search import Search
from repro_py.tune.settings import TuneSettings, estimate_lines


def print_plan(out: Console, settings: TuneSettings, plan: Any, run_id: str, first: list[str]) -> None:
    kind = "SIMULATED " if plan.simulated else ""
    table = Table(title=f"{kind}tuning plan {run_id}: host {plan.target.host} ({plan.target.endpoint.base_url})")
    table.add_column("setting")
    table.add_column("value")
    for key, value in settings.summary_rows():
        table.add_row(key, value)
    table.add_row("lossless gate", plan.lossless_restart.summary().removeprefix("lossless gate: "))
    table.add_row("figures", plan.lossless_restart.figures)
    table.add_row("first restarts", ", ".join(first) or "-")
    out.print(table)
    for line in estimate_lines(settings, plan.estimate):
        out.print(line, highlight=False)


def print_winners(out: Console, search: Search) -> None:
    table = Table(title="winners")
    for col in ("objective", "winner", "tok/s (interval)", "runner-up", "margin", "confidence"):
        table.add_column(col)
    for w in verdict.winners(search):
        table.add_row(
            w.objective.title,
            w.label or "-",
            "-" if w.estimate is None else f"{w.estimate.mean:.1f} ({w.estimate.low:.1f}..{w.estimate.high:.1f})",
            w.runner_up or "-",
            "-" if w.margin is None else f"{w.margin:.1%}",
            "-" if w.confidence is None else f"{w.confidence:.0%}",
        )
    out.print(table)
