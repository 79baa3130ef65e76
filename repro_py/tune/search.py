"""The search state: what each restarted config showed, whether it goes up the ladder, who wins.

Within a restart, :meth:`Search.judge` applies the racing rule of
:mod:`repro_py.tune.ladder` per objective and the SLOs after every rung; a
config that survives the last rung is gated (coding, lossless, sampled, config echo)
before it can win (:meth:`Search.wants_gates`), and :meth:`Search.finish`
records how it ended from its result file (also what ``--resume`` replays).
Which config to restart next is :mod:`repro_py.tune.proposals`, who wins :mod:`repro_py.tune.verdict`: both
read this state, which knows neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from repro_py.tune.ladder import Rung, race
from repro_py.tune.noise import Estimate, NoiseModel
from repro_py.tune.objectives import (
    Cell,
    Objective,
    Slo,
    accept_length,
    find_cell,
    repeat_values,
    slo_cells,
    step_ms,
    step_values,
)
from repro_py.tune.projection import projected_values
from repro_py.tune.records import (
    FAILED,
    GATES_FAIL,
    GATES_NOT_RUN,
    GATES_PASS,
    OK,
    Proposal,
    Record,
    RepeatedConfig,
    RungData,
    split_label,
)
from repro_py.tune.space import Space
from repro_py.tune.surrogate import Surrogate
from repro_py.tune.sweepio import GATE_FAILED, PlannedConfig

#: Speculative configs in before the surrogate proposes, the current config included (so two are the design's).
DEFAULT_INIT_DESIGN = 3
DEFAULT_KAPPA = 2.0
#: A restart is not worth less than this relative gain over the current winner (the noise floor of one).
DEFAULT_MIN_GAIN = 0.01
#: Restarts of the reference (the inventory's current config): two measure the between-restart noise.
DEFAULT_REFERENCE_RESTARTS = 2
#: The surrogate's candidates lie within this distance of the objective's winner so far (the surrogate's
#: features scaled to the space's range, root mean square over them): :func:`repro_py.tune.proposals.trust_region`.
DEFAULT_TRUST_RADIUS = 0.35
#: Repeated restarts of leaders with restarts a new candidate cannot use (the search stopped, or one restart is
#: left where a gated config takes two): :func:`repro_py.tune.repeats.confirmation`.
DEFAULT_CONFIRM_RESTARTS = 2


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    objectives: tuple[Objective, ...]
    ladder: tuple[Rung, ...]
    slos: tuple[Slo, ...] = ()
    all_objectives: tuple[Objective, ...] = ()  # every objective definition (for SLOs on another's cell)
    init_design: int = DEFAULT_INIT_DESIGN
    kappa: float = DEFAULT_KAPPA
    min_gain: float = DEFAULT_MIN_GAIN
    reference_restarts: int = DEFAULT_REFERENCE_RESTARTS
    #: at most this many repeated restarts of leaders the run's confidence does not separate, with restarts no new
    #: candidate can use (0: none)
    confirm_restarts: int = DEFAULT_CONFIRM_RESTARTS
    trust_radius: float = DEFAULT_TRUST_RADIUS
    #: while some unmeasured configs have settings apart from top-K that no measured config has, the surrogate
    #: proposes among those only, each at the top-K it predicts best (:func:`repro_py.tune.proposals.new_settings`)
    new_settings_first: bool = True
    #: a new setting is proposed at the top-K the fewest measured configs have (the surrogate's best among those);
    #: off: at the top-K the surrogate predicts best
    new_settings_topk_balanced: bool = True
    #: a local check restarts the winner's unmeasured neighbour the surrogate knows least (off: the one with the
    #: highest upper bound) (:func:`repro_py.tune.proposals.local_check`)
    local_check_least_known: bool = True

    @property
    def final(self) -> Rung:
        return self.ladder[-1]

    def previous_release(self) -> SearchSettings:
        """The search the previous release shipped (new settings first, each at the top-K the surrogate predicts
        best; a local check at the neighbour with the highest upper bound; confirmation restarts): the benchmarks
        run it beside this one."""
        return dataclasses.replace(self, local_check_least_known=False, new_settings_topk_balanced=False)


class Search:
    def __init__(
        self,
        space: Space,
        settings: SearchSettings,
        noise: NoiseModel,
        *,
        default: PlannedConfig | None = None,
    ) -> None:
        # the inventory's current config is always measured: it joins the space when the space lacks it
        self.space = space if default is None or default.label in space.by_label() else space.including(default)
        self.settings = settings
        self.noise = noise
        self.default = default
        self.records: dict[str, Record] = {}
        self.stop_reason: str | None = None
        self._extra_cells = slo_cells(
            settings.slos, settings.objectives, settings.all_objectives or settings.objectives
        )
        self.surrogates: dict[str, Surrogate] = {}

    # ------------------------------------------------------------ bookkeeping

    @property
    def screen(self) -> str:
        return self.settings.ladder[0].name

    def objective(self, key: str) -> Objective:
        return next(o for o in self.settings.objectives if o.key == key)

    def cells(self) -> list[Cell]:
        """Every cell this run measures: the objectives' and those the SLOs add."""
        return sorted({o.cell for o in self.settings.objectives} | set(self._extra_cells))

    def is_reference(self, rec: Record) -> bool:
        """The inventory's current config (any of its restarts): the one to beat, measured at every rung."""
        return self.default is not None and rec.base_label == self.default.label

    def reference_records(self) -> list[Record]:
        return [] if self.default is None else self._restarts(self.default.label)

    def restarts_of(self, rec: Record) -> list[Record]:
        """Every restart of ``rec``'s config (measured or in flight), the first first."""
        return self._restarts(rec.base_label)

    def _restarts(self, base_label: str) -> list[Record]:
        return sorted((r for r in self.records.values() if r.base_label == base_label), key=lambda r: r.restart)

    def confirmations(self) -> list[Record]:
        """The repeated restarts of configs other than the reference (leaders measured again)."""
        return [r for r in self.records.values() if r.restart > 1 and not self.is_reference(r)]

    def mandatory_restarts(self, *, restores: int, per_config: int = 1) -> tuple[int, list[str]]:
        """Restarts every run makes besides its candidates: (count, what they are). ``restores``: the final
        restores (one per host); ``per_config``: the restarts of a gated config (two when its lossless gate has a
        restart of its own); a repeated restart is one."""
        parts: list[tuple[int, str]] = []
        gate = ", its lossless gate's own restart included" if per_config > 1 else ""
        default_is_baseline = self.default is not None and self.default.spec.algorithm == "none"
        if any(c.spec.algorithm == "none" for c in self.space.configs) and not default_is_baseline:
            parts.append((per_config, f"the baseline (the lossless reference{gate})"))
        if self.default is not None:
            n = max(1, self.settings.reference_restarts)
            why = f"; restarted {n} times to measure the between-restart noise" if n > 1 else ""
            what = f"the inventory's current config {self.default.label} (the one to beat{gate}{why})"
            parts.append((per_config + n - 1, what))
        if restores == 1:
            parts.append((1, "the final restore"))
        elif restores > 1:
            parts.append((restores, "the final restores (one per host)"))
        return sum(n for n, _ in parts), [f"{n} for {what}" for n, what in parts]

    def config_for(self, label: str) -> PlannedConfig | None:
        """The config of a result label (a repeated restart ``x.r2`` of the space's ``x`` included)."""
        base, restart = split_label(label)
        cfg = self.space.by_label().get(base)
        if cfg is None:
            return None
        return cfg if restart == 1 else RepeatedConfig.of(cfg, restart)

    def start(self, proposal: Proposal) -> Record:
        rec = Record(
            cfg=proposal.cfg,
            order=len(self.records) + 1,
            proposal=proposal.reason,
            alive={o.key for o in self.settings.objectives},
        )
        self.records[rec.label] = rec
        return rec

    def abandon(self, label: str) -> None:
        """The config in flight was interrupted: it has no result and will be proposed again."""
        rec = self.records.pop(label, None)
        self.noise.forget(label)
        if rec is not None and self.is_reference(rec):
            self.noise.forget_restart(rec.restart)

    def estimate(self, rec: Record, rung: str, objective: str) -> Estimate | None:
        """One record's (one restart's) estimate at ``rung``; below the full rung a projection to its length."""
        data = rec.rung(rung)
        if data is None or objective not in data.tps:
            return None
        return self.noise.estimate(rung, objective, data.tps[objective], projected=objective in data.measured_tps)

    def final_estimate(self, rec: Record, objective: str) -> Estimate | None:
        """The full rung's estimate of a config, over every restart that measured it there."""
        final = self.settings.final.name
        parts = [e for r in self.restarts_of(rec) if (e := self.estimate(r, final, objective)) is not None]
        return self.noise.combined(parts)

    # ------------------------------------------------------------ inside one restart

    def cells_for(self, label: str, rung_index: int) -> list[Cell]:
        rec = self.records[label]
        cells = [o.cell for o in self.settings.objectives if o.key in rec.alive]
        if rung_index == len(self.settings.ladder) - 1:
            cells += [c for c in self._extra_cells if c not in cells]
        return sorted(set(cells))

    def judge(self, label: str, rung_index: int, cells: Sequence[Mapping[str, Any]]) -> set[str]:
        """Record one rung's cells, decide per objective whether the config goes on; the objectives left."""
        rec = self.records[label]
        rung = self.settings.ladder[rung_index]
        final = rung_index == len(self.settings.ladder) - 1
        data = RungData(rung.name)
        for obj in self.settings.objectives:
            if obj.key not in rec.alive:
                continue
            cell = find_cell(cells, obj.cell)
            values = repeat_values(cell, "output_tps")
            if not values:
                why = (cell or {}).get("reason") or "no repeat without failed requests"
                data.cell_errors[obj.key] = f"{obj.cell}: {why}"
                continue
            projected = None if final else projected_values(cell, rung.max_tokens, self.settings.final.max_tokens)
            if projected is not None and len(projected) == len(values):
                data.tps[obj.key], data.measured_tps[obj.key] = projected, values
            else:
                data.tps[obj.key] = values
            data.accept[obj.key] = accept_length(cell)
            data.step_ms[obj.key] = step_ms(cell)
            data.accept_values[obj.key] = repeat_values(cell, "accept_length")
            data.step_values[obj.key] = step_values(cell)
            for slo in self.settings.slos:
                if slo.kind == "latency":
                    data.slo_values[f"{obj.key}|{slo.metric}"] = repeat_values(cell, slo.metric)
        if final:
            for slo in self.settings.slos:
                if slo.kind == "tps":
                    owner = next(
                        o for o in (self.settings.all_objectives or self.settings.objectives) if o.metric == slo.metric
                    )
                    data.slo_values[f"*|{slo.metric}"] = repeat_values(find_cell(cells, owner.cell), "output_tps")
        self._apply(rec, data, final=final)
        return rec.alive

    def _observe(self, rec: Record, data: RungData, *, final: bool) -> None:
        """Feed the noise model: repeats (within), the reference's restarts (between), projections."""
        for key, values in data.tps.items():
            self.noise.observe(data.name, key, rec.label, values)
            if self.is_reference(rec):
                self.noise.observe_restart(data.name, key, rec.restart, values)
        for key, values in data.slo_values.items():
            self.noise.observe(data.name, key.split("|")[1], rec.label, values)
        for key, values in data.accept_values.items():
            self.noise.observe(data.name, f"{key}:accept", rec.label, values)
        for key, values in data.step_values.items():
            self.noise.observe(data.name, f"{key}:step", rec.label, values)
        if final:
            for lower in rec.rungs:
                for key, values in lower.tps.items():
                    if key in lower.measured_tps and key in data.tps:
                        self.noise.observe_projection(
                            lower.name, key, rec.label, values, full_rung=data.name, full=data.tps[key]
                        )

    def _decide(self, rec: Record, data: RungData, key: str) -> dict[str, Any]:
        if key in data.cell_errors:
            return {"keep": False, "reason": f"no valid measurement: {data.cell_errors[key]}"}
        own = self.noise.estimate(data.name, key, data.tps[key], projected=key in data.measured_tps)
        assert own is not None
        others = [
            (r.label, est)
            for r in self.records.values()
            if r is not rec
            and r.restart == 1
            and not r.known_ineligible
            and (est := self.estimate(r, data.name, key)) is not None
        ]
        verdict_ = race(own, others)
        decision: dict[str, Any] = {"keep": verdict_.keep, "reason": verdict_.reason, "estimate": own.as_dict()}
        if not verdict_.keep and self.is_reference(rec):
            decision.update(
                keep=True,
                reason=f"the inventory's current config is measured to the end (the one to beat); {verdict_.reason}",
            )
        elif not verdict_.keep and rec.restart > 1:
            decision.update(
                keep=True, reason=f"a repeated restart of a leader is measured to the end; {verdict_.reason}"
            )
        for slo in self.settings.slos:
            values = data.slo_values.get(f"{key}|{slo.metric}") or []
            est = self.noise.estimate(data.name, slo.metric, values)
            if est is not None and slo.clearly_violated(est.low, est.high):
                decision.update(keep=False, reason=f"violates SLO {slo}: {est.text()}")
        return decision

    def _apply(self, rec: Record, data: RungData, *, final: bool, decided: bool = False) -> None:
        """Feed the noise model, then (unless replaying recorded decisions) decide per objective."""
        self._observe(rec, data, final=final)
        rec.rungs.append(data)
        if not decided:
            for key in sorted(rec.alive):
                data.decisions[key] = self._decide(rec, data, key)
            if final:
                for slo in self.settings.slos:
                    values = data.slo_values.get(f"*|{slo.metric}") or []
                    est = self.noise.estimate(data.name, slo.metric, values)
                    if slo.kind == "tps" and est is not None and slo.clearly_violated(est.low, est.high):
                        data.slo_failures.append(f"{slo}: {est.text()}")
                        for decision in data.decisions.values():
                            decision.update(keep=False, reason=f"violates SLO {slo}: {est.text()}")
        rec.slo_failures.extend(data.slo_failures)
        rec.alive = {k for k, d in data.decisions.items() if d.get("keep")}

    def wants_gates(self, label: str) -> tuple[bool, str]:
        rec = self.records[label]
        if rec.restart > 1:
            why = "measures the between-restart noise" if self.is_reference(rec) else "confirms a leader's figure"
            return False, (
                f"not gated: restart {rec.restart} of {rec.base_label}, which was gated in its first restart "
                f"(this one {why})"
            )
        if rec.cfg.spec.algorithm == "none":
            return True, "the lossless reference (the autoregressive baseline) is gated"
        if rec.alive and rec.last_rung == self.settings.final.name:
            return True, f"survived every rung for {', '.join(sorted(rec.alive))}"
        dropped = [
            f"{key} at {where[0]}: {where[1]}"
            for key in sorted(o.key for o in self.settings.objectives)
            if (where := rec.dropped_at(key)) is not None
        ]
        return False, "not gated: dropped before the full measurement (" + "; ".join(dropped) + ")"

    def finish(self, label: str, result: Mapping[str, Any]) -> Record:
        """The result file is written: record how the config ended."""
        rec = self.records[label]
        rec.wall_s = float(result.get("wall_s") or 0.0)
        failure = result.get("failure") or {}
        gates = result.get("gates") or {}
        coding = gates.get("coding") if isinstance(gates.get("coding"), Mapping) else {}
        rate = (coding or {}).get("pass_rate")
        rec.coding_pass_rate = float(rate) if isinstance(rate, int | float) else None
        if result.get("status") != "ok":
            rec.status = FAILED
            rec.failure = f"{failure.get('class')}: {failure.get('reason')}"
            if failure.get("class") == GATE_FAILED:
                rec.gates, rec.gates_reason = GATES_FAIL, str(failure.get("reason"))
            rec.alive = set()
            return rec
        rec.status = OK
        if gates.get("skipped") is True:
            rec.gates, rec.gates_reason = GATES_NOT_RUN, str(gates.get("reason") or "")
        elif gates.get("passed") is True:
            rec.gates = GATES_PASS
        else:
            rec.gates = GATES_FAIL
        for slo in self.settings.slos:
            rate = rec.coding_pass_rate
            if slo.metric == "coding_pass_rate" and rec.gates == GATES_PASS and rate is not None and not slo.met(rate):
                rec.slo_failures.append(f"{slo}: coding pass rate {rec.coding_pass_rate:.2f}")
        final = rec.rung(self.settings.final.name)
        if final is not None:
            for slo in self.settings.slos:
                values = final.slo_values.get(f"*|{slo.metric}")
                est = self.noise.estimate(final.name, slo.metric, values or [])
                if (
                    slo.kind == "tps"
                    and est is not None
                    and not slo.met(est.mean)
                    and not any(f.startswith(str(slo)) for f in rec.slo_failures)
                ):
                    rec.slo_failures.append(f"{slo}: {est.text()} (not met)")
        return rec

    def replay(self, result: Mapping[str, Any]) -> Record | None:
        """Rebuild a record from a result file written by an earlier session of this run (``--resume``)."""
        label = str(result.get("label"))
        cfg = self.config_for(label)
        tune = ((result.get("bench") or {}).get("tune")) or {}
        if cfg is None:
            return None
        rec = self.start(Proposal(cfg, str(tune.get("proposal") or "(measured by an earlier session)")))
        for index, doc in enumerate(tune.get("rungs") or []):
            data = RungData.from_dict(doc)
            final = index == len(self.settings.ladder) - 1
            rec.alive = set(data.decisions) | set(data.cell_errors)
            self._apply(rec, data, final=final, decided=True)
        if not tune.get("rungs"):
            rec.alive = set()
        return self.finish(label, result)

    # ------------------------------------------------------------ outcome

    def eligible(self, rec: Record, obj: Objective) -> bool:
        """Measured at full fidelity for ``obj``, every gate passed, every SLO met (point estimates); a repeated
        restart stands for its config's first, never for itself; a config whose repeated restart failed (a leader
        measured again, not the reference) is out."""
        if rec.restart > 1 or rec.status != OK or rec.gates != GATES_PASS or rec.slo_failures:
            return False
        if not self.is_reference(rec) and any(r.status == FAILED for r in self.restarts_of(rec)):
            return False
        if obj.key not in rec.alive:
            return False
        final = rec.rung(self.settings.final.name)
        if final is None or obj.key not in final.tps:
            return False
        for slo in self.settings.slos:
            if slo.kind == "latency":
                est = self.noise.estimate(final.name, slo.metric, final.slo_values.get(f"{obj.key}|{slo.metric}") or [])
                if est is None or not slo.met(est.mean):
                    return False
        return True

    def ranked(self, obj: Objective) -> list[tuple[Record, Estimate]]:
        out = []
        for rec in self.records.values():
            if self.eligible(rec, obj):
                est = self.final_estimate(rec, obj.key)
                if est is not None:
                    out.append((rec, est))
        return sorted(out, key=lambda item: (-item[1].mean, item[0].order))
