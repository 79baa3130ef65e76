"""What the tuner knows about each config it restarted: rung by rung figures and decisions.

A :class:`Record` holds one config's per-repeat figures at every rung it
reached (raw values, so estimates are recomputed whenever the pooled noise
level changes), the decision taken at each rung, and how it ended: failed
(with the sweep's failure class), dropped before the gates, gated (pass or
fail), and which SLOs it met. Everything here is rebuilt from the per-config
result files on ``--resume`` (the ``bench.tune`` block the tuner adds to each).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from repro_py.tune.sweepio import PlannedConfig

MEASURING = "measuring"
OK = "ok"
FAILED = "failed"
GATES_PASS = "pass"
GATES_FAIL = "FAIL"
GATES_NOT_RUN = "not run"


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A config to restart and why (:mod:`repro_py.tune.proposals` makes them); with the surrogate's prediction
    when one made it."""

    cfg: PlannedConfig
    reason: str
    objective: str | None = None
    predicted: float | None = None  # surrogate mean (screen scale), tok/s
    upper: float | None = None


#: The label suffix of a repeated restart of the reference: ``<label>.r2`` is its second restart.
REPEAT_MARK = ".r"
#: The service role's variable that restarts the service even when nothing in its unit changed.
FORCE_RESTART_VAR = "sglang_service_force_restart"


@dataclasses.dataclass(frozen=True)
class RepeatedConfig(PlannedConfig):
    """The same config restarted again (the reference, for the between-restart noise): its own label, so its
    result is a file of its own (``configs/<label>.r2.json``); the engine runs exactly the config."""

    restart: int = 2

    @property
    def label(self) -> str:
        return f"{self.base_label}{REPEAT_MARK}{self.restart}"

    @property
    def base_label(self) -> str:
        return super().label  # the config's label in the space, its sampling setting included

    def extravars(self) -> dict[str, object]:
        """As its config's, and a restart forced: on a host that still runs the config (a leader confirmed right
        after its first restart, on the host that measured it) the service role would otherwise find nothing
        changed and keep the running process, and the "restart" would measure the same engine again."""
        return {**super().extravars(), FORCE_RESTART_VAR: True}

    @classmethod
    def of(cls, cfg: PlannedConfig, restart: int) -> RepeatedConfig:
        return cls(
            spec=cfg.spec, sim_fault=cfg.sim_fault, extra_vars=cfg.extra_vars, sampling=cfg.sampling, restart=restart
        )


def split_label(label: str) -> tuple[str, int]:
    """(the config's label, restart number) of a result label: ``x.r2`` -> ``("x", 2)``, ``x`` -> ``("x", 1)``."""
    base, mark, number = label.rpartition(REPEAT_MARK)
    if mark and base and number.isdigit() and int(number) >= 2:
        return base, int(number)
    return label, 1


@dataclasses.dataclass
class RungData:
    """Raw figures of one rung: per objective the per-repeat tok/s and the acceptance, per SLO its repeats.

    Below the full rung ``tps`` holds each repeat's figure projected to the full output length
    (:mod:`repro_py.tune.projection`) and ``measured_tps`` what was measured; at the full rung, or when a
    repeat lacks the timing to project, ``tps`` is the measured figure and ``measured_tps`` has no entry."""

    name: str
    tps: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # objective key -> repeats
    measured_tps: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # objective -> as measured
    accept: dict[str, float | None] = dataclasses.field(default_factory=dict)  # objective key -> accept length
    step_ms: dict[str, float | None] = dataclasses.field(default_factory=dict)  # objective key -> decode step
    accept_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # per repeat (counters)
    step_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # per repeat (median chunk gap)
    slo_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # "objective|metric" -> repeats
    cell_errors: dict[str, str] = dataclasses.field(default_factory=dict)  # objective key -> why no figure
    decisions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # objective -> keep/reason
    slo_failures: list[str] = dataclasses.field(default_factory=list)  # SLOs clearly violated at this rung

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> RungData:
        return cls(
            name=str(doc.get("name")),
            tps={str(k): [float(x) for x in v] for k, v in (doc.get("tps") or {}).items()},
            measured_tps={str(k): [float(x) for x in v] for k, v in (doc.get("measured_tps") or {}).items()},
            accept={str(k): (None if v is None else float(v)) for k, v in (doc.get("accept") or {}).items()},
            step_ms={str(k): (None if v is None else float(v)) for k, v in (doc.get("step_ms") or {}).items()},
            accept_values={str(k): [float(x) for x in v] for k, v in (doc.get("accept_values") or {}).items()},
            step_values={str(k): [float(x) for x in v] for k, v in (doc.get("step_values") or {}).items()},
            slo_values={str(k): [float(x) for x in v] for k, v in (doc.get("slo_values") or {}).items()},
            cell_errors={str(k): str(v) for k, v in (doc.get("cell_errors") or {}).items()},
            decisions={str(k): dict(v) for k, v in (doc.get("decisions") or {}).items()},
            slo_failures=[str(x) for x in doc.get("slo_failures") or []],
        )


@dataclasses.dataclass
class Record:
    cfg: PlannedConfig
    order: int
    proposal: str
    alive: set[str]
    rungs: list[RungData] = dataclasses.field(default_factory=list)
    status: str = MEASURING
    failure: str | None = None
    gates: str | None = None
    gates_reason: str | None = None
    coding_pass_rate: float | None = None
    slo_failures: list[str] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0

    @property
    def label(self) -> str:
        return self.cfg.label

    @property
    def base_label(self) -> str:
        """The config's label in the space (a repeated restart's ``x.r2`` -> ``x``)."""
        return self.cfg.base_label if isinstance(self.cfg, RepeatedConfig) else self.cfg.label

    @property
    def restart(self) -> int:
        return self.cfg.restart if isinstance(self.cfg, RepeatedConfig) else 1

    def rung(self, name: str) -> RungData | None:
        return next((r for r in self.rungs if r.name == name), None)

    @property
    def last_rung(self) -> str | None:
        return self.rungs[-1].name if self.rungs else None

    @property
    def known_ineligible(self) -> bool:
        """Failed, garbled or out of its SLOs: never a reference for dropping others."""
        return self.status == FAILED or self.gates == GATES_FAIL or bool(self.slo_failures)

    def dropped_at(self, objective: str) -> tuple[str, str] | None:
        """(rung, reason) where ``objective`` was dropped, if it was."""
        for rung in self.rungs:
            decision = rung.decisions.get(objective)
            if decision is not None and not decision.get("keep"):
                return rung.name, str(decision.get("reason"))
        return None

    def tune_block(self) -> dict[str, Any]:
        """The ``bench.tune`` block of the per-config result (rebuilds this record on --resume)."""
        return {"order": self.order, "proposal": self.proposal, "rungs": [r.as_dict() for r in self.rungs]}
