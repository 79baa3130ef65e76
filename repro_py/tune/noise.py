"""Confidence intervals for measured figures, with a noise level pooled across configs.

Two or three repeats of one config say little about the noise on their own,
but every config measured at the same rung (same cell, same output length,
same repeats) shares the measurement process. The relative variance of a
figure is therefore pooled over every config measured at that rung (each
contributing its ``n - 1`` degrees of freedom), shrunk towards a prior
(``prior_cv`` with ``prior_dof`` degrees of freedom, so the first configs of a
run are not judged with a near-zero spread). Repeats inside one restart do
not see what changes between restarts (clocks, placement, a cold cache), so a
between-restart floor ``floor_cv`` is added to the standard error of every
estimate. The interval is ``mean +- z * se`` with ``z`` from the confidence
level (two-sided normal quantile).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from statistics import NormalDist

DEFAULT_PRIOR_CV = 0.05
DEFAULT_PRIOR_DOF = 4.0
DEFAULT_FLOOR_CV = 0.01
DEFAULT_CONFIDENCE = 0.90


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A figure's mean over repeats, its standard error and the interval half-width at ``z``."""

    mean: float
    se: float
    n: int
    z: float

    @property
    def low(self) -> float:
        return self.mean - self.z * self.se

    @property
    def high(self) -> float:
        return self.mean + self.z * self.se

    def as_dict(self) -> dict[str, float | int]:
        return {
            "mean": round(self.mean, 4),
            "se": round(self.se, 4),
            "n": self.n,
            "low": round(self.low, 4),
            "high": round(self.high, 4),
        }

    def text(self, digits: int = 1) -> str:
        return f"{self.mean:.{digits}f} +- {self.z * self.se:.{digits}f}"


def z_for(confidence: float) -> float:
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence={confidence} must be in 0.5..1 (exclusive)")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def prob_greater(a: Estimate, b: Estimate) -> float:
    """P(true a > true b) under independent normal errors."""
    spread = math.hypot(a.se, b.se)
    if spread <= 0:
        return 1.0 if a.mean > b.mean else (0.5 if a.mean == b.mean else 0.0)
    return NormalDist().cdf((a.mean - b.mean) / spread)


@dataclasses.dataclass
class NoiseModel:
    """Pooled relative variance per (rung, metric); see the module docstring."""

    prior_cv: float = DEFAULT_PRIOR_CV
    prior_dof: float = DEFAULT_PRIOR_DOF
    floor_cv: float = DEFAULT_FLOOR_CV
    confidence: float = DEFAULT_CONFIDENCE
    _pool: dict[tuple[str, str], dict[str, tuple[float, int]]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prior_cv <= 0 or self.prior_dof < 0 or self.floor_cv < 0:
            raise ValueError(
                f"noise model: prior_cv={self.prior_cv} must be > 0, prior_dof={self.prior_dof} and "
                f"floor_cv={self.floor_cv} >= 0"
            )
        self.z = z_for(self.confidence)

    def observe(self, rung: str, metric: str, label: str, values: Sequence[float]) -> None:
        """Record one config's repeats (replaces an earlier record of the same config)."""
        if len(values) < 2:
            return
        mean = statistics.fmean(values)
        if mean <= 0:
            return
        rel = [v / mean for v in values]
        self._pool.setdefault((rung, metric), {})[label] = (statistics.variance(rel), len(values) - 1)

    def forget(self, label: str) -> None:
        """Drop a config's records (it was interrupted before its result was written)."""
        for pooled in self._pool.values():
            pooled.pop(label, None)

    def rel_variance(self, rung: str, metric: str) -> float:
        pooled = self._pool.get((rung, metric), {})
        num = self.prior_dof * self.prior_cv**2 + sum(var * dof for var, dof in pooled.values())
        den = self.prior_dof + sum(dof for _, dof in pooled.values())
        return num / den if den > 0 else self.prior_cv**2

    def rel_sd(self, rung: str, metric: str) -> float:
        return math.sqrt(self.rel_variance(rung, metric))

    def estimate(self, rung: str, metric: str, values: Sequence[float]) -> Estimate | None:
        """The estimate from one config's repeats (``None`` without a single valid repeat)."""
        if not values:
            return None
        mean = statistics.fmean(values)
        rel_se = math.sqrt(self.rel_variance(rung, metric) / len(values) + self.floor_cv**2)
        return Estimate(mean=mean, se=abs(mean) * rel_se, n=len(values), z=self.z)
