"""The tuning loop: propose, restart + measure through the sweep's per-config path, record, repeat.

Each proposal runs through ``SweepRunner.run_config_and_write`` (the sweep's
own restart, server-info, benchmark, gates, failure classes, fingerprint and
atomic result write) with :class:`~repro_py.tune.measure.TunerMeasure`, under
the sweep's Ctrl-C handling: the config in flight is abandoned (no result
file; ``--resume`` proposes it again), the run is marked ``interrupted``.

Only a config that survives the ladder is gated, and with
``--lossless-restart separate`` only such a config gets the lossless gate's own
restart (deterministic inference) after its production one; a config dropped
earlier costs one restart. A config interrupted between its two restarts
(``partial/<label>.json``) is finished first on ``--resume``: only its gate's
restart runs, and the search replays it from its result.

Budgets are hard limits checked before every restart: ``max_restarts``
counts every engine restart of the run (earlier sessions included, the lossless
gates' own restarts included, the final restore of the inventory's default
config included and reserved up front); a config starts only when the restarts
it may take (two when its lossless gate may need its own) fit. ``max_hours``
compares the wall time of the configs measured so far, plus the median time of
one more config and the restore, with the limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from repro_py.atomicio import write_json_atomic
from repro_py.tune import proposals
from repro_py.tune.measure import TunerMeasure
from repro_py.tune.outcome import latest_figures, outcome_text
from repro_py.tune.records import RepeatedConfig
from repro_py.tune.search import Search
from repro_py.tune.sweepio import (
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    STATE_RUNNING,
    Interrupted,
    Measure,
    Plan,
    PlannedConfig,
    Reconfigurer,
    RunDir,
    SweepOptions,
    SweepRunner,
    controller_fingerprint,
    decide,
    restarts_of,
)


@dataclasses.dataclass(frozen=True)
class Budget:
    max_restarts: int | None = None
    max_hours: float | None = None
    restore: bool = True

    def __post_init__(self) -> None:
        if self.max_restarts is not None and self.max_restarts < (2 if self.restore else 1):
            raise ValueError(
                f"--max-restarts {self.max_restarts}: at least {2 if self.restore else 1} "
                "(one config" + (" and the final restore of the default config)" if self.restore else ")")
            )
        if self.max_hours is not None and not self.max_hours > 0:
            raise ValueError(f"--max-hours {self.max_hours}: must be > 0")

    def as_dict(self) -> dict[str, object]:
        return {"max_restarts": self.max_restarts, "max_hours": self.max_hours, "restore_reserved": self.restore}


def budget_problem(search: Search, budget: Budget, per_config: int = 1) -> str | None:
    """Why ``budget`` cannot measure what every run must (the baseline, the current config in its restarts,
    the restore, one candidate), or None. ``per_config``: the restarts a gated config takes (two when its
    lossless gate has a restart of its own)."""
    if budget.max_restarts is None:
        return None
    restore = budget.restore and search.default is not None
    needed, parts = search.mandatory_restarts(restore=restore, per_config=per_config)
    if budget.max_restarts >= needed + per_config:
        return None
    return (
        f"--max-restarts {budget.max_restarts} is too small for this run: it needs "
        + ", ".join(parts)
        + f", and {per_config} for at least one candidate; allowed: {needed + per_config} or more"
    )


@dataclasses.dataclass
class TuneOutcome:
    interrupted: bool
    stop_reason: str
    restarts: int
    measured_this_session: list[str]
    reused: list[str]
    restore: dict[str, Any] | None
    wall_s: float


class TuneLoop:
    def __init__(
        self,
        plan: Plan,
        search: Search,
        run_dir: RunDir,
        reconfigurer: Reconfigurer,
        inner: Measure,
        *,
        bundle: Path,
        budget: Budget,
        console: Console | None = None,
        on_progress: Any = None,
    ) -> None:
        self.plan = plan
        self.search = search
        self.run_dir = run_dir
        self.budget = budget
        self.bundle = bundle
        self.console = console or Console(stderr=True)
        self.on_progress = on_progress
        self.measure = TunerMeasure(inner, search)
        self.runner = SweepRunner(
            plan,
            run_dir,
            reconfigurer,
            self.measure,
            bundle=bundle,
            options=SweepOptions(restore=budget.restore),
            console=self.console,
        )
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
            current = controller_fingerprint(self.bundle, self.plan.target, cfg)
            decision = decide(self.run_dir, label, current)
            if decision.run:
                self.console.print(f"[yellow]{escape(label)}: {escape(decision.reason)}; measured again if proposed[/]")
                continue
            if self.search.replay(doc) is not None:
                self.restarts[label] = restarts_of(doc)
                reused.append(label)
                self.console.print(f"[dim]{escape(label)}: {escape(decision.reason)}; not rerun[/]")
        return reused

    # ------------------------------------------------------------ budget

    def restarts_used(self) -> int:
        """Every restart of the run so far: each measured config's (one or two), and the first restart of a config
        whose second has not run yet (``partial/``)."""
        pending = sum(1 for label in self._pending() if label not in self.search.records)
        return sum(self.restarts.get(label, 1) for label in self.search.records) + pending

    def _pending(self) -> list[str]:
        """Configs of the space whose first stage ran in an earlier session (their second restart is owed)."""
        by_label = self.search.space.by_label()
        return [label for label in self.run_dir.partial_labels() if label in by_label]

    def _reserve(self) -> int:
        return 1 if self.budget.restore and self.plan.default_config is not None else 0

    def remaining(self) -> int | None:
        """Restarts left for configs (the restore set aside), when the budget counts restarts."""
        if self.budget.max_restarts is None:
            return None
        return self.budget.max_restarts - self.restarts_used() - self._reserve()

    def _need(self, cfg: PlannedConfig) -> int:
        """The restarts ``cfg`` may take: a repeated restart is never gated (one); any other config two when its
        lossless gate may need a restart of its own."""
        return 1 if isinstance(cfg, RepeatedConfig) else self.plan.lossless_restart.restarts_per_config

    def _budget_stop(self, need: int | None = None) -> str | None:
        """Why no further config may start (None: it may); ``need``: the restarts it may take."""
        reserve = self._reserve()
        need = self.plan.lossless_restart.restarts_per_config if need is None else need
        used = self.restarts_used()
        if self.budget.max_restarts is not None and used + reserve + need > self.budget.max_restarts:
            extra = " plus the final restore" if reserve else ""
            why = f"; a config may take {need} (its lossless gate's own restart)" if need > 1 else ""
            return f"restart budget reached: {used} of {self.budget.max_restarts} restarts used{extra}{why}"
        if self.budget.max_hours is not None:
            walls = [r.wall_s for r in self.search.records.values() if r.wall_s > 0]
            spent = sum(walls)
            per = statistics.median(walls) if walls else float(self.plan.estimate.get("per_config_s", 0.0))
            restore = float(self.plan.estimate.get("load_s_per_config", 0.0)) if reserve else 0.0
            limit = self.budget.max_hours * 3600.0
            if spent + per + restore > limit:
                return (
                    f"time budget reached: {spent / 3600:.2f} h spent, one more config (~{per:.0f} s) and the "
                    f"restore would pass --max-hours {self.budget.max_hours:g}"
                )
        return None

    # ------------------------------------------------------------ the loop

    async def run(self) -> TuneOutcome:
        return await self.runner.run_guarded(self._run)

    def _write_progress(self) -> None:
        try:
            plan_doc: dict[str, Any] = json.loads(self.run_dir.plan.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            plan_doc = {}
        measured = sorted(self.search.records.values(), key=lambda r: r.order)
        plan_doc["configs"] = [{"label": r.label, "config": r.cfg.short()} for r in measured]
        write_json_atomic(self.run_dir.plan, plan_doc)
        if self.on_progress is not None:
            self.on_progress()

    def _recorded(self, label: str, result: Any, outcome: TuneOutcome) -> None:
        rec = self.search.records[label]
        self.restarts[label] = restarts_of(result)
        outcome.measured_this_session.append(label)
        line = f"{latest_figures(self.search, rec)}; {outcome_text(rec, self.search)}"
        self.console.print(f"  -> {escape(line)} ({rec.wall_s:.1f} s)", highlight=False)
        self._write_progress()

    async def _finish_pending(self, outcome: TuneOutcome) -> None:
        """Configs interrupted between their two restarts: only the lossless gate's restart is owed; run it first."""
        by_label = self.search.space.by_label()
        for label in self._pending():
            if self.runner.cancel.is_set() or label in self.search.records or self._budget_stop(need=1):
                continue
            self.console.print(f"[bold]{escape(label)}[/]: finishing its lossless gate's restart", highlight=False)
            try:
                result = await self.runner.run_config_and_write(by_label[label])
            except (asyncio.CancelledError, Interrupted):
                self.runner.cancel.set()
                return
            if self.search.replay(result) is not None:
                self._recorded(label, result, outcome)

    async def _run(self) -> TuneOutcome:
        problem = budget_problem(self.search, self.budget, self.plan.lossless_restart.restarts_per_config)
        if problem is not None:
            raise ValueError(problem)
        t0 = time.monotonic()
        reused = self.replay()
        outcome = TuneOutcome(False, "", 0, [], reused, None, 0.0)
        self.run_dir.write_state(STATE_RUNNING, host=self.plan.target.host, simulated=self.plan.simulated, tool="tune")
        cancel = self.runner.cancel
        await self._finish_pending(outcome)
        while not cancel.is_set():
            stop = self._budget_stop(need=1)
            if stop is not None:
                outcome.stop_reason = stop
                break
            proposal = proposals.propose(self.search, self.remaining(), self.plan.lossless_restart.restarts_per_config)
            if proposal is None:
                outcome.stop_reason = self.search.stop_reason or "nothing left to propose"
                break
            stop = self._budget_stop(need=self._need(proposal.cfg))
            if stop is not None:
                outcome.stop_reason = stop
                break
            rec = self.search.start(proposal)
            self.console.print(f"[bold]#{rec.order} {escape(rec.label)}[/]: {escape(proposal.reason)}", highlight=False)
            try:
                result = await self.runner.run_config_and_write(proposal.cfg)
            except (asyncio.CancelledError, Interrupted):
                self.search.abandon(rec.label)
                cancel.set()
                break
            if rec.label in self.runner.config_run.resumed:  # its ladder ran in an earlier session: replay it
                self.search.abandon(rec.label)
                self.search.replay(result)
            else:
                self.search.finish(rec.label, result)
            self._recorded(rec.label, result, outcome)
        outcome.restarts = self.restarts_used()
        if cancel.is_set():
            outcome.interrupted = True
            outcome.stop_reason = "interrupted (Ctrl-C)"
            self.run_dir.write_state(STATE_INTERRUPTED, reason="SIGINT")
            outcome.wall_s = time.monotonic() - t0
            return outcome
        self._write_progress()
        if self.budget.restore and self.plan.default_config is not None:
            outcome.restore = await self.runner.restore(self.plan.default_config)
            outcome.restarts += 1
            if cancel.is_set():
                outcome.interrupted = True
                self.run_dir.write_state(STATE_INTERRUPTED, reason="SIGINT during the restore")
                outcome.wall_s = time.monotonic() - t0
                return outcome
        elif self.plan.default_config is None:
            outcome.restore = {"status": "not_configured", "reason": "the inventory has no sweep_default_config"}
        else:
            outcome.restore = {"status": "skipped", "reason": "--no-restore"}
        self.run_dir.write_state(STATE_COMPLETE, restore=outcome.restore, stop_reason=outcome.stop_reason)
        outcome.wall_s = time.monotonic() - t0
        return outcome
