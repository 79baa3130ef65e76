"""The bookkeeping of a tuning run over its result files, shared by the one-host loop (:mod:`repro_py.tune.loop`)
and the loop over several hosts (:mod:`repro_py.tune.fleetloop`): what an earlier session measured (``--resume``
replays it), the restarts made so far, whether the budget lets another config start, and the plan's list of the
configs measured.

Budgets are hard limits checked before every restart: ``max_restarts`` counts every engine restart of the run
(earlier sessions included, the lossless gates' own restarts included, the final restores of the inventory's
default config included and reserved up front); a config starts only when the restarts it may take (two when its
lossless gate may need its own) fit. ``max_hours`` compares the wall time of the configs measured so far, plus
the median time of one more config and the restore, with the limit.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from repro_py.atomicio import write_json_atomic
from repro_py.tune.budget import Budget
from repro_py.tune.outcome import latest_figures, outcome_text
from repro_py.tune.records import RepeatedConfig
from repro_py.tune.search import Search
from repro_py.tune.sweepio import Plan, PlannedConfig, RunDir, controller_fingerprint, decide, restarts_of


@dataclasses.dataclass
class TuneOutcome:
    interrupted: bool
    stop_reason: str
    restarts: int
    measured_this_session: list[str]
    reused: list[str]
    restore: dict[str, Any] | None
    wall_s: float


class TuneBook:
    def __init__(
        self, plan: Plan, search: Search, run_dir: RunDir, *, bundle: Path, budget: Budget,
        console: Console | None = None, on_progress: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        self.plan = plan
        self.search = search
        self.run_dir = run_dir
        self.budget = budget
        self.bundle = bundle
        self.console = console or Console(stderr=True)
        self.on_progress = on_progress
        #: the restarts each measured config's result took (its production restart, and its lossless gate's own)
        self.restarts: dict[str, int] = {}

    # ------------------------------------------------------------ resume

    def replay(self) -> list[str]:
        """Rebuild the search from this run's result files whose fingerprint still stands."""
        reused: list[str] = []
        docs = sorted(
            self.run_dir.results(),
            key=lambda d: (
                str(d.get("started_at") or ""),
                int(((d.get("bench") or {}).get("tune") or {}).get("order") or 0),
            ),
        )
        for doc in docs:
            label = str(doc.get("label"))
            cfg = self.search.config_for(label)
            if cfg is None:
                self.console.print(f"[yellow]{escape(label)}: not in the space of this run; ignored[/]")
                continue
            decision = decide(self.run_dir, label, self.fingerprint(cfg))
            if decision.run:
                self.console.print(f"[yellow]{escape(label)}: {escape(decision.reason)}; measured again if proposed[/]")
                continue
            if self.search.replay(doc) is not None:
                self.restarts[label] = restarts_of(doc)
                self.replayed(label, doc)
                reused.append(label)
                self.console.print(f"[dim]{escape(label)}: {escape(decision.reason)}; not rerun[/]")
        return reused

    def fingerprint(self, cfg: PlannedConfig) -> dict[str, str]:
        """What a result of ``cfg`` must have been measured under to stand."""
        return controller_fingerprint(self.bundle, self.plan.target, cfg)

    def replayed(self, label: str, doc: Mapping[str, Any]) -> None:
        """A result of an earlier session was taken into the search (a fleet notes its host)."""

    # ------------------------------------------------------------ budget

    def restarts_used(self) -> int:
        """Every restart of the run so far: each measured config's (one or two), and the first restart of a config
        whose second has not run yet (``partial/``)."""
        pending = sum(1 for label in self.pending() if label not in self.search.records)
        return sum(self.restarts.get(label, 1) for label in self.search.records) + pending

    def pending(self) -> list[str]:
        """Configs of the space whose first stage ran in an earlier session (their second restart is owed)."""
        by_label = self.search.space.by_label()
        return [label for label in self.run_dir.partial_labels() if label in by_label]

    def reserve(self) -> int:
        """The restarts set aside for the end: the final restore."""
        return 1 if self.budget.restore and self.plan.default_config is not None else 0

    def remaining(self) -> int | None:
        """Restarts left for configs (the restores set aside), when the budget counts restarts."""
        if self.budget.max_restarts is None:
            return None
        return self.budget.max_restarts - self.restarts_used() - self.reserve()

    def need(self, cfg: PlannedConfig) -> int:
        """The restarts ``cfg`` may take: a repeated restart is never gated (one); any other config two when its
        lossless gate may need a restart of its own."""
        return 1 if isinstance(cfg, RepeatedConfig) else self.plan.lossless_restart.restarts_per_config

    def budget_stop(self, need: int | None = None) -> str | None:
        """Why no further config may start (None: it may); ``need``: the restarts it may take."""
        reserve = self.reserve()
        need = self.plan.lossless_restart.restarts_per_config if need is None else need
        used = self.restarts_used()
        if self.budget.max_restarts is not None and used + reserve + need > self.budget.max_restarts:
            extra = "" if not reserve else " plus the final restore" if reserve == 1 else f" plus {reserve} restores"
            why = f"; a config may take {need} (its lossless gate's own restart)" if need > 1 else ""
            return f"restart budget reached: {used} of {self.budget.max_restarts} restarts used{extra}{why}"
        if self.budget.max_hours is not None:
            walls = [r.wall_s for r in self.search.records.values() if r.wall_s > 0]
            spent = self.seconds_spent()
            per = statistics.median(walls) if walls else float(self.plan.estimate.get("per_config_s", 0.0))
            restore = float(self.plan.estimate.get("load_s_per_config", 0.0)) if reserve else 0.0
            limit = self.budget.max_hours * 3600.0
            if spent + per + restore > limit:
                return (
                    f"time budget reached: {spent / 3600:.2f} h spent, one more config (~{per:.0f} s) and the "
                    f"restore would pass --max-hours {self.budget.max_hours:g}"
                )
        return None

    def seconds_spent(self) -> float:
        """The time the run has spent so far: one host measures one config at a time, so their walls add up."""
        return sum(r.wall_s for r in self.search.records.values() if r.wall_s > 0)

    # ------------------------------------------------------------ progress

    def write_progress(self) -> None:
        try:
            plan_doc: dict[str, Any] = json.loads(self.run_dir.plan.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            plan_doc = {}
        measured = sorted(self.search.records.values(), key=lambda r: r.order)
        plan_doc["configs"] = [{"label": r.label, "config": r.cfg.short()} for r in measured]
        write_json_atomic(self.run_dir.plan, plan_doc)
        if self.on_progress is not None:
            self.on_progress()

    def recorded(self, label: str, result: Any, outcome: TuneOutcome, where: str = "") -> None:
        rec = self.search.records[label]
        self.restarts[label] = restarts_of(result)
        outcome.measured_this_session.append(label)
        line = f"{latest_figures(self.search, rec)}; {outcome_text(rec, self.search)}"
        self.console.print(f"  {escape(where)}-> {escape(line)} ({rec.wall_s:.1f} s)", highlight=False)
        self.write_progress()
