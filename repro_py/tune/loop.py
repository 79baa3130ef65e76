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

The budgets and the bookkeeping over the result files are :mod:`repro_py.tune.book`'s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from repro_py.tune import proposals
from repro_py.tune.book import TuneBook, TuneOutcome
from repro_py.tune.budget import Budget, budget_problem
from repro_py.tune.measure import TunerMeasure
from repro_py.tune.search import Search
from repro_py.tune.sweepio import (
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    STATE_RUNNING,
    Interrupted,
    Measure,
    Plan,
    Reconfigurer,
    RunDir,
    SweepOptions,
    SweepRunner,
)

__all__ = ["Budget", "TuneLoop", "TuneOutcome", "budget_problem"]


class TuneLoop(TuneBook):
    """The search on one host: one config at a time."""

    def __init__(
        self, plan: Plan, search: Search, run_dir: RunDir, reconfigurer: Reconfigurer, inner: Measure, *,
        bundle: Path, budget: Budget, console: Console | None = None, on_progress: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(plan, search, run_dir, bundle=bundle, budget=budget, console=console,
                         on_progress=on_progress)  # fmt: skip
        self.measure = TunerMeasure(inner, search)
        self.runner = SweepRunner(plan, run_dir, reconfigurer, self.measure, bundle=bundle,
                                  options=SweepOptions(restore=budget.restore), console=self.console)  # fmt: skip

    # ------------------------------------------------------------ the loop

    async def run(self) -> TuneOutcome:
        return await self.runner.run_guarded(self._run)

    async def _finish_pending(self, outcome: TuneOutcome) -> None:
        """Configs interrupted between their two restarts: only the lossless gate's restart is owed; run it first."""
        by_label = self.search.space.by_label()
        for label in self.pending():
            if self.runner.cancel.is_set() or label in self.search.records or self.budget_stop(need=1):
                continue
            self.console.print(f"[bold]{escape(label)}[/]: finishing its lossless gate's restart", highlight=False)
            try:
                result = await self.runner.run_config_and_write(by_label[label])
            except (asyncio.CancelledError, Interrupted):
                self.runner.cancel.set()
                return
            if self.search.replay(result) is not None:
                self.recorded(label, result, outcome)

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
            stop = self.budget_stop(need=1)
            if stop is not None:
                outcome.stop_reason = stop
                break
            proposal = proposals.propose(self.search, self.remaining(), self.plan.lossless_restart.restarts_per_config)
            if proposal is None:
                outcome.stop_reason = self.search.stop_reason or "nothing left to propose"
                break
            stop = self.budget_stop(need=self.need(proposal.cfg))
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
            self.recorded(rec.label, result, outcome)
        outcome.restarts = self.restarts_used()
        if cancel.is_set():
            outcome.interrupted = True
            outcome.stop_reason = "interrupted (Ctrl-C)"
            self.run_dir.write_state(STATE_INTERRUPTED, reason="SIGINT")
            outcome.wall_s = time.monotonic() - t0
            return outcome
        self.write_progress()
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
