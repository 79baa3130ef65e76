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


@dataclasses.dataclass
class RungData:
    """Raw figures of one rung: per objective the per-repeat tok/s and the acceptance, per SLO its repeats."""

    name: str
    tps: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # objective key -> repeats
    accept: dict[str, float | None] = dataclasses.field(default_factory=dict)  # objective key -> accept length
    step_ms: dict[str, float | None] = dataclasses.field(default_factory=dict)  # objective key -> decode step
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
            accept={str(k): (None if v is None else float(v)) for k, v in (doc.get("accept") or {}).items()},
            step_ms={str(k): (None if v is None else float(v)) for k, v in (doc.get("step_ms") or {}).items()},
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
