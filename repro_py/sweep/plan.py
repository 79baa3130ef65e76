"""Sweep plan: which configs, on which host, with which benchmark settings, and how long it will take.

The grid's sources and validation: :mod:`repro_py.sweep.grid`; the host:
:mod:`repro_py.sweep.inventory`; the time estimate: :mod:`repro_py.sweep.estimate`; where the lossless gate
runs: :mod:`repro_py.sweep.lossless_restart`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from repro_py.results.lossless_mode import SEPARATE
from repro_py.sampling_settings import Sampling
from repro_py.spec_config import SpecConfigError
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.estimate import estimate, estimate_basis
from repro_py.sweep.grid import PlannedConfig, describe, run_order, validate_all, validate_config
from repro_py.sweep.inventory import Target
from repro_py.sweep.lossless_restart import LosslessRestart, resolve


@dataclasses.dataclass(frozen=True)
class Plan:
    target: Target
    configs: tuple[PlannedConfig, ...]
    default_config: PlannedConfig | None
    bench: BenchPlan
    grid_source: str
    estimate: Mapping[str, float]
    #: the run's sampling setting (``--temperature``/``--top-p``); an entry may name its own
    sampling: Sampling = dataclasses.field(default_factory=Sampling)
    #: where the lossless gate runs (``--lossless-restart``) and what the figures are measured under
    lossless_restart: LosslessRestart = dataclasses.field(default_factory=LosslessRestart)

    @property
    def simulated(self) -> bool:
        return self.target.simulated

    def as_dict(self, run_id: str) -> dict[str, object]:
        return {
            "schema": 1,
            "run_id": run_id,
            "simulated": self.simulated,
            "engine_kind": self.target.engine_kind,
            "banner": "SIMULATED engine: figures are from a model, not hardware" if self.simulated else None,
            "inventory": str(self.target.inventory),
            "host": self.target.host,
            "endpoint": self.target.endpoint.base_url,
            "grid_source": self.grid_source,
            "configs": [c.planned() for c in self.configs],
            "default_config": None if self.default_config is None else self.default_config.short(),
            "bench": self.bench.as_dict(),
            "sampling": self.sampling.as_dict(),
            "lossless_restart": self.lossless_restart.as_dict(),
            "estimate": dict(self.estimate),
            "estimate_basis": estimate_basis(self.estimate),
        }


def make_plan(
    target: Target,
    raws: Sequence[Mapping[str, object]],
    *,
    grid_source: str,
    bench: BenchPlan,
    results_root: Path,
    sampling: Sampling | None = None,
    lossless_mode: str = SEPARATE,
) -> Plan:
    """The validated plan; ``lossless_mode``: ``--lossless-restart`` (:mod:`repro_py.sweep.lossless_restart`)."""
    lossless = resolve(lossless_mode, target)
    drafter_bs = target.var("sweep_drafter_block_size")
    drafter_block_size = drafter_bs if isinstance(drafter_bs, int) and not isinstance(drafter_bs, bool) else None
    allow = target.var("sglang_service_allow_block_mismatch") is True
    configs = run_order(
        validate_all(
            raws, simulated=target.simulated, drafter_block_size=drafter_block_size, allow_block_mismatch=allow,
            sampling=sampling,
        )
    )
    default_raw = target.var("sweep_default_config")
    default: PlannedConfig | None = None
    if isinstance(default_raw, Mapping):
        try:
            default = validate_config(
                default_raw,
                simulated=target.simulated,
                drafter_block_size=drafter_block_size,
                allow_block_mismatch=allow,
            )
        except SpecConfigError as exc:
            raise PlanError(
                [f"sweep_default_config ({describe(default_raw)}): invalid_config: " + "; ".join(exc.problems)]
            ) from exc
    return Plan(
        target=target,
        configs=tuple(configs),
        default_config=default,
        bench=bench,
        grid_source=grid_source,
        estimate=estimate(target, configs, bench, results_root, lossless=lossless),
        sampling=sampling or Sampling(),
        lossless_restart=lossless,
    )

