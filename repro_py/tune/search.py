"""The search state: what each restarted config showed, whether it goes up the ladder, who wins.

Within a restart, :meth:`Search.judge` applies the racing rule of
:mod:`repro_py.tune.ladder` per objective and the SLOs after every rung; a
config that survives the last rung is gated (coding, lossless, sampled, config echo)
before it can win (:meth:`Search.wants_gates`), and :meth:`Search.finish`
records how it ended from its result file (also what ``--resume`` replays).
Which config to restart next is :mod:`repro_py.tune.proposals`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from repro_py.tune import proposals
from repro_py.tune.ladder import Rung, race
from repro_py.tune.noise import Estimate, NoiseModel, prob_greater
from repro_py.tune.objectives import (
    Cell,
    Objective,
    Slo,
    accept_length,
    find_cell,
    repeat_values,
    slo_cells,
    step_ms,
)
from repro_py.tune.proposals import Proposal
from repro_py.tune.records import (
    FAILED,
    GATES_FAIL,
    GATES_NOT_RUN,
    GATES_PASS,
    OK,
    Record,
    RungData,
)
from repro_py.tune.space import Space
from repro_py.tune.surrogate import Surrogate
from repro_py.tune.sweepio import GATE_FAILED, PlannedConfig

DEFAULT_INIT_DESIGN = 4
DEFAULT_KAPPA = 2.0
#: A restart is not worth less than this relative gain over the current winner (the noise floor of one).
DEFAULT_MIN_GAIN = 0.01


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    objectives: tuple[Objective, ...]
    ladder: tuple[Rung, ...]
    slos: tuple[Slo, ...] = ()
    all_objectives: tuple[Objective, ...] = ()  # every objective definition (for SLOs on another's cell)
    init_design: int = DEFAULT_INIT_DESIGN
    kappa: float = DEFAULT_KAPPA
    min_gain: float = DEFAULT_MIN_GAIN

    @property
    def final(self) -> Rung:
        return self.ladder[-1]


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


class Search:
    def __init__(
        self,
        space: Space,
        settings: SearchSettings,
        noise: NoiseModel,
        *,
        default: PlannedConfig | None = None,
    ) -> None:
        self.space = space
        self.settings = settings
        self.noise = noise
        self.default = default if default is not None and default.label in space.by_label() else None
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
        self.records.pop(label, None)
        self.noise.forget(label)

    def estimate(self, rec: Record, rung: str, objective: str) -> Estimate | None:
        data = rec.rung(rung)
        if data is None or objective not in data.tps:
            return None
        return self.noise.estimate(rung, objective, data.tps[objective])

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
            data.tps[obj.key] = values
            data.accept[obj.key] = accept_length(cell)
            data.step_ms[obj.key] = step_ms(cell)
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

    def _apply(self, rec: Record, data: RungData, *, final: bool, decided: bool = False) -> None:
        """Feed the noise model, then (unless replaying recorded decisions) decide per objective."""
        for key, values in data.tps.items():
            self.noise.observe(data.name, key, rec.label, values)
        for key, values in data.slo_values.items():
            self.noise.observe(data.name, key.split("|")[1], rec.label, values)
        rec.rungs.append(data)
        if not decided:
            for key in sorted(rec.alive):
                if key in data.cell_errors:
                    data.decisions[key] = {"keep": False, "reason": f"no valid measurement: {data.cell_errors[key]}"}
                    continue
                own = self.noise.estimate(data.name, key, data.tps[key])
                assert own is not None
                others = [
                    (r.label, est)
                    for r in self.records.values()
                    if r is not rec and not r.known_ineligible and (est := self.estimate(r, data.name, key)) is not None
                ]
                verdict = race(own, others)
                decision = {"keep": verdict.keep, "reason": verdict.reason, "estimate": own.as_dict()}
                for slo in self.settings.slos:
                    values = data.slo_values.get(f"{key}|{slo.metric}") or []
                    est = self.noise.estimate(data.name, slo.metric, values)
                    if est is not None and slo.clearly_violated(est.low, est.high):
                        decision.update(keep=False, reason=f"violates SLO {slo}: {est.text()}")
                data.decisions[key] = decision
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
        cfg = self.space.by_label().get(label)
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
        """Measured at full fidelity for ``obj``, every gate passed, every SLO met (point estimates)."""
        if rec.status != OK or rec.gates != GATES_PASS or rec.slo_failures or obj.key not in rec.alive:
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
                est = self.estimate(rec, self.settings.final.name, obj.key)
                if est is not None:
                    out.append((rec, est))
        return sorted(out, key=lambda item: (-item[1].mean, item[0].order))

    def winners(self) -> list[Winner]:
        out: list[Winner] = []
        for obj in self.settings.objectives:
            ranked = self.ranked(obj)
            if not ranked:
                out.append(
                    Winner(
                        obj,
                        None,
                        None,
                        None,
                        None,
                        None,
                        "no config reached full fidelity, passed every gate and met every SLO",
                    )
                )
                continue
            (best, best_est), rest = ranked[0], ranked[1:]
            if not rest:
                dropped = sum(1 for r in self.records.values() if r.dropped_at(obj.key))
                note = f"the only config measured at full fidelity that passed; {dropped} others were clearly behind"
                out.append(Winner(obj, best.label, best_est, None, None, None, note))
                continue
            runner, runner_est = rest[0]
            conf = prob_greater(best_est, runner_est)
            margin = (best_est.mean - runner_est.mean) / best_est.mean
            if best_est.low > runner_est.high:
                note = f"clearly ahead of {runner.label} ({margin:.1%})"
            else:
                note = f"within the noise of {runner.label} (margin {margin:.1%}; either is a sound choice)"
            out.append(Winner(obj, best.label, best_est, runner.label, runner_est, conf, note))
        return out

    # ------------------------------------------------------------ proposals (repro_py.tune.proposals)

    def propose(self) -> Proposal | None:
        """The next config to restart, or None (``stop_reason`` says why)."""
        return proposals.propose(self)

    def fit_surrogates(self) -> dict[str, Surrogate]:
        """Fit (or refit) the surrogate of every objective on the screened configs so far (for the report)."""
        return proposals.fit_surrogates(self)

    def equivalence_key(self, cfg: PlannedConfig) -> tuple[object, ...]:
        return proposals.equivalence_key(self, cfg)
