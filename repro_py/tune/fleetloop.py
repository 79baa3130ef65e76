"""The tuner on several hosts of one hardware class, side by side (``python -m repro_py.tune INVENTORY`` when the
selection holds several hosts of one class).

1. **The current config on every host.** Each host first restarts the inventory's current config (the host that
   measures the autoregressive baseline, the lossless reference, does so right after it), so the current config
   has one restart per host. Their spread, host to host and restart to restart, is the between-restart noise a
   winner must beat: the search compares figures as measured, and a config measured on a faster host gains
   nothing beyond that noise. Each host's offset from the class median (:mod:`repro_py.sweep.fleetoffsets`) is
   recorded, and a host beyond ``--host-offset-limit`` is taken out: what it measured leaves the search (its
   result files are kept under ``flagged/<host>/``). The hosts start their candidates once every host's current
   config is in, so a flagged host has measured nothing else.
2. **Candidates, asynchronously.** A host takes the next proposal as soon as it is free, so the hosts measure a
   batch as wide as the class; the surrogate believes the configs in flight at its predictions, so the batch
   spreads (:func:`repro_py.tune.proposals.propose`). Each config climbs its ladder on its own host and is judged
   at each rung against what the class has measured by then: no host waits for another's rung. The gates of a
   speculative config wait for the baseline's result (its outputs are what they compare with); when the host
   measuring the baseline is lost, a config waiting there is given back so its host can measure the baseline.
3. **Budgets.** ``--max-restarts`` counts every restart of the run on every host, a final restore per host set
   aside, and the restarts a config in flight may still take; ``--max-restarts-per-host`` caps one host's.
   Restarts that led nowhere (a config whose host was lost, a flagged host's measurements) count too.
4. **Hosts fail; configs do not.** A config that fails on a host that is then unreachable, or whose lease is
   lost, leaves the search with that attempt recorded (its next result lists it) and the host is taken out; the
   search proposes it again, to a host that is left.
5. **The end**, also after Ctrl-C: every host still reachable is restored to the current config side by side,
   and its lease given back; a host that could not be is named. ``tune/fleet.json`` records the hosts (status,
   cause, offset, restarts, configs, restore), rewritten atomically as the run goes.

Ctrl-C stops every host's config at once (abandoned, never half-written; a config between its two restarts
keeps its ``partial/`` for ``--resume``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.atomicio import write_json_atomic
from repro_py.sweep.configrun import ConfigRun
from repro_py.sweep.fleethosts import FleetHost, OneAtATime
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT, host_offsets
from repro_py.sweep.state import HostRunDir, now_iso
from repro_py.tune import proposals, repeats
from repro_py.tune.book import TuneOutcome
from repro_py.tune.budget import Budget, budget_problem
from repro_py.tune.fleetbook import ACTIVE, EXCLUDED, FLAGGED, FleetBook, TuneHost
from repro_py.tune.measure import TunerMeasure
from repro_py.tune.records import Proposal, RepeatedConfig, split_label
from repro_py.tune.search import Search
from repro_py.tune.sweepio import (
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    STATE_RUNNING,
    Interrupted,
    Measure,
    Plan,
    PlannedConfig,
    RunDir,
    restarts_of,
)


class GiveBack(Exception):
    """A config's gates wait for a baseline that has no host measuring it: the config is given back."""


class FleetTuneLoop(FleetBook):
    def __init__(
        self, plan: Plan, search: Search, run_dir: RunDir, hosts: list[FleetHost], inner: Measure, *, bundle: Path,
        budget: Budget, class_key: str, offset_limit: float = DEFAULT_LIMIT, console: Console | None = None,
    ) -> None:  # fmt: skip
        super().__init__(plan, search, run_dir, bundle=bundle, budget=budget, class_key=class_key,
                         offset_limit=offset_limit, console=console)  # fmt: skip
        self.measure = TunerMeasure(inner, search)
        for host in hosts:
            host.reconfigurer = OneAtATime(host.reconfigurer)
            run = ConfigRun(dataclasses.replace(plan, target=host.target), HostRunDir(run_dir.path, host.name),
                            host.reconfigurer, self.measure, self.cancel, self.console,
                            before_reference=self._wait_for_baseline, on_stage=self._stage_done)  # fmt: skip
            self.hosts[host.name] = TuneHost(host, run)
        #: label -> the attempts that did not count (a lost host's), as the result lists them
        self.attempts: dict[str, list[dict[str, Any]]] = {}
        self.stop_reason = ""
        self._changed = asyncio.Event()
        self._references_in = asyncio.Event()
        #: the baseline's production stage is done (its samples, which the production gates read, are there)
        self._baseline_produced = False

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _changes(self) -> None:
        await self._changed.wait()

    async def run(self) -> TuneOutcome:
        return await self.host_tasks.guarded(self._run)

    # ------------------------------------------------------------ the run

    async def _run(self) -> TuneOutcome:
        per_config = self.plan.lossless_restart.restarts_per_config
        problem = budget_problem(self.search, self.budget, per_config, hosts=len(self.hosts))
        if problem is not None:
            raise ValueError(problem)
        self.load_record()
        self._t0 = time.monotonic()
        outcome = TuneOutcome(False, "", 0, [], self.replay(), None, 0.0)
        self.run_dir.write_state(STATE_RUNNING, hosts=sorted(self.hosts), simulated=self.plan.simulated, tool="tune")
        self.write_record()
        await self.host_tasks.phase([self._host_work(hs, outcome) for hs in self.hosts.values()])
        outcome.restarts = self.restarts_used()
        outcome.stop_reason = self.stop_reason or self.search.stop_reason or "nothing left to propose"
        self.write_progress()
        await self._restore_all()
        # a restore that ran names its label (a host whose lease is another run's is not touched: no restart)
        outcome.restarts += sum(1 for h in self.hosts.values() if "label" in (h.restore or {}))
        outcome.restore = self._restore_summary()
        outcome.interrupted = self.cancel.is_set()
        outcome.wall_s = time.monotonic() - self._t0
        self.write_record()
        if outcome.interrupted:
            outcome.stop_reason = "interrupted (Ctrl-C)"
            self.run_dir.write_state(STATE_INTERRUPTED, reason="SIGINT", restore=outcome.restore)
        else:
            self.run_dir.write_state(STATE_COMPLETE, restore=outcome.restore, stop_reason=outcome.stop_reason)
        return outcome

    async def _host_work(self, hs: TuneHost, outcome: TuneOutcome) -> None:
        try:
            await self._references(hs, outcome)
            if not self._references_in.is_set():
                self._check_references()
                await self._references_in.wait()
            await self._candidates(hs, outcome)
        except asyncio.CancelledError:
            return

    # ------------------------------------------------------------ 1. the current config on every host

    def _baseline_config(self) -> PlannedConfig | None:
        default = self.search.default
        if default is not None and default.spec.algorithm == "none":
            return None
        return next((c for c in self.search.space.configs if c.spec.algorithm == "none"), None)

    def _reference_done(self, hs: TuneHost) -> bool:
        default = self.search.default
        return default is None or any(split_label(label)[0] == default.label for label in hs.configs)

    async def _references(self, hs: TuneHost, outcome: TuneOutcome) -> None:
        baseline = self._baseline_config()
        default = self.search.default
        while hs.status == ACTIVE and not self.cancel.is_set():
            if baseline is not None and baseline.label not in self.search.records:  # the first host to ask
                proposal = Proposal(baseline, "lossless reference: the autoregressive baseline runs first, as in "
                                    "a sweep")  # fmt: skip
            elif default is None or self._reference_done(hs):
                return
            elif default.label not in self.search.records:
                proposal = Proposal(default, f"the inventory's current config (the one to beat), on {hs.name}")
            else:
                number = repeats.next_reference_restart(self.search)
                proposal = Proposal(RepeatedConfig.of(default, number),
                                    f"restart {number} of the inventory's current config, on {hs.name}: its restarts "
                                    "on every host give the between-restart noise and each host's offset")  # fmt: skip
            await self._measure(hs, proposal, outcome)

    def _check_references(self) -> None:
        """Once every active host has measured the current config: offsets, and a host beyond the limit out."""
        if self._references_in.is_set():
            return
        active = [h for h in self.hosts.values() if h.status == ACTIVE]
        if any(not self._reference_done(h) for h in active):
            return
        default = self.search.default
        refs: dict[str, Any] = {}
        for hs in active:
            label = next((x for x in hs.configs if default is not None and split_label(x)[0] == default.label), None)
            doc = None if label is None else self.run_dir.read_result(label)
            if doc is not None and doc.get("status") == "ok":
                refs[hs.name] = doc.get("bench")
        for name, offset in host_offsets(refs, limit=self.offset_limit).items():
            hs = self.hosts[name]
            hs.offset = offset
            self.say(name, f"the current config: {offset.reason}")
            if offset.flagged and len(refs) > 1:
                self._flag(hs, f"flagged: {offset.reason}")
        self._references_in.set()
        self.write_record()
        self._notify()

    def _flag(self, hs: TuneHost, cause: str) -> None:
        """Take ``hs`` out and what it measured out of the search (kept under ``flagged/<host>/``); the baseline's
        outputs stay, as they do not depend on the host's speed."""
        hs.status, hs.cause = FLAGGED, cause
        self.say(hs.name, f"taken out of the run: {cause}")
        baseline = self._baseline_config()
        for label in list(hs.configs):
            if baseline is not None and label == baseline.label:
                continue
            path = self.run_dir.result(label)
            moved = self.run_dir.path / "flagged" / hs.name / path.name
            if path.is_file():
                moved.parent.mkdir(parents=True, exist_ok=True)
                path.replace(moved)
            hs.spent += self.restarts.pop(label, 1)
            self.search.abandon(label)
            hs.configs.remove(label)
            self.say(hs.name, f"{label}: left out of the search (kept as {moved.relative_to(self.run_dir.path)})")

    # ------------------------------------------------------------ 2. candidates

    async def _candidates(self, hs: TuneHost, outcome: TuneOutcome) -> None:
        per_config = self.plan.lossless_restart.restarts_per_config
        while hs.status == ACTIVE and not self.cancel.is_set():
            own = self.host_stop(hs, 1)
            proposal, why = (None, own) if own else self._next(hs, per_config)
            if proposal is None:
                if not own and self.flying:  # what the others measure may open room or new proposals
                    await self._changes()
                    continue
                hs.stopped = why
                if own:
                    self.say(hs.name, f"stops: {own}")
                else:
                    self.stop_reason = self.stop_reason or why
                return
            await self._measure(hs, proposal, outcome)

    def _next(self, hs: TuneHost, per_config: int) -> tuple[Proposal | None, str]:
        """The proposal for ``hs`` now, or (None, why none)."""
        for label in self.pending():  # configs whose first restart ran in an earlier session
            if label not in self.search.records:
                cfg = self.search.space.by_label()[label]
                stop = self.budget_stop(need=1)
                return (None, stop) if stop else (Proposal(cfg, "finishing its lossless gate's restart"), "")
        stop = self.budget_stop(need=1)
        if stop is not None:
            return None, stop
        for label in self.attempts:  # a config whose host was lost goes to a host that is left, before anything new
            lost = self.search.space.by_label().get(label)
            if lost is not None and label not in self.search.records:
                need = self.need(lost)
                stop = self.budget_stop(need=need) or self.host_stop(hs, need)
                return (None, stop) if stop else (Proposal(lost, "proposed again: the host measuring it was lost"), "")
        self.search.stop_reason = None
        proposal = proposals.propose(self.search, self.remaining(), per_config)
        if proposal is None:
            return None, self.search.stop_reason or "nothing left to propose"
        need = self.need(proposal.cfg)
        stop = self.budget_stop(need=need) or self.host_stop(hs, need)
        return (None, stop) if stop else (proposal, "")

    # ------------------------------------------------------------ one config on one host

    def _stage_done(self, cfg: PlannedConfig, stage: str) -> None:
        baseline = self._baseline_config()
        if baseline is not None and cfg.label == baseline.label and stage == "production":
            self._baseline_produced = True
            self._notify()

    async def _wait_for_baseline(self, _cfg: PlannedConfig, lossless: bool) -> None:
        """A speculative config's gates wait for what they read of the baseline: its result (``lossless``), else
        its production stage (the sampled gate's samples). When the baseline has no host measuring it (its host
        was lost), the config is given back so this host can measure it."""
        baseline = self._baseline_config()
        while baseline is not None and not (self._baseline_produced and not lossless):
            rec = self.search.records.get(baseline.label)
            if rec is not None and rec.status != "measuring":
                return
            if rec is None:
                raise GiveBack(f"{baseline.label} is back in the search with no host measuring it")
            await self._changes()

    async def _measure(self, hs: TuneHost, proposal: Proposal, outcome: TuneOutcome) -> None:
        """Measure ``proposal`` on ``hs`` and take its result into the search; a config whose host is lost, or
        that is given back, leaves the search unmeasured (Ctrl-C: the task is cancelled)."""
        cfg = proposal.cfg
        rec = self.search.start(proposal)
        need = self.need(cfg)
        self.flying[cfg.label] = (hs.name, need)
        self.say(hs.name, f"#{rec.order} {cfg.label}: {proposal.reason}")
        t0 = time.monotonic()
        try:
            result = await hs.config_run.run(cfg, self.fingerprint(cfg))
        except GiveBack as exc:
            self._leave(hs, cfg, spent=1, why=f"given back: {exc}")
            return
        except (asyncio.CancelledError, Interrupted):
            self.flying.pop(cfg.label, None)
            self.search.abandon(cfg.label)
            self._notify()
            raise asyncio.CancelledError from None
        except Exception as exc:  # its restart or measurement raised: the host is out, the config proposed again
            raised = f"its worker raised {type(exc).__name__}: {exc}"
            self._leave(hs, cfg, spent=1, why=f"left the search: {raised}")
            self._take_out(hs, raised)
            return
        failure = result["failure"]
        if failure is not None:
            cause = await asyncio.to_thread(hs.host.check)
            if cause is not None:
                self.attempts.setdefault(cfg.label, []).append({
                    "host": hs.name, "cause": cause, "at": now_iso(),
                    "failure": {"class": failure.get("class"), "reason": failure.get("reason")},
                })  # fmt: skip
                self._leave(hs, cfg, spent=restarts_of(result), why=f"its host is lost ({cause}); proposed again")
                self._take_out(hs, cause)
                return
        self._write(hs, cfg, result, t0)
        if cfg.label in hs.config_run.resumed:  # its ladder ran in an earlier session: replay it
            self.search.abandon(cfg.label)
            self.search.replay(result)
        else:
            self.search.finish(cfg.label, result)
        self.flying.pop(cfg.label, None)
        hs.configs.append(cfg.label)
        self.recorded(cfg.label, result, outcome, where=f"[{hs.name}] ")
        self._check_references()
        self.write_record()
        self._notify()

    def _leave(self, hs: TuneHost, cfg: PlannedConfig, *, spent: int, why: str) -> None:
        """``cfg`` leaves the search unmeasured (proposed again later); the restarts it took on ``hs`` count."""
        self.flying.pop(cfg.label, None)
        self.search.abandon(cfg.label)
        self.run_dir.partial(cfg.label).unlink(missing_ok=True)
        hs.spent += spent
        self.say(hs.name, f"{cfg.label}: {why}")
        self.write_record()
        self._notify()

    def _take_out(self, hs: TuneHost, cause: str) -> None:
        hs.status, hs.cause = EXCLUDED, cause
        self.say(hs.name, f"taken out of the run: {cause}")
        self._check_references()
        self.write_record()
        self._notify()

    def _write(self, hs: TuneHost, cfg: PlannedConfig, result: Any, t0: float) -> None:
        offset = hs.offset
        result["host"] = {
            "name": hs.name, "class": self.class_key,
            # the search compares figures as measured (the hosts' spread is in its noise): no offset applied
            "offset": None, "offset_uncertainty": None,
            "offset_measured": None if offset is None else offset.offset,
        }  # fmt: skip
        result["host_class"] = {"key": self.class_key, **hs.host.class_info}
        result["attempts"] = list(self.attempts.get(cfg.label, []))
        result["finished_at"] = now_iso()
        result["wall_s"] = round(float(result["wall_s"]) + time.monotonic() - t0, 3)
        write_json_atomic(self.run_dir.result(cfg.label), result)
        self.run_dir.partial(cfg.label).unlink(missing_ok=True)

