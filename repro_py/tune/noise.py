"""Confidence intervals for measured figures: every noise term measured in the run, with a prior until it is.

A figure of one config is the mean of a few repeats inside one restart. Its
error has three parts, each estimated from this run's own measurements:

* **within a restart** (the spread of repeats): two or three repeats of one
  config say little on their own, but every config measured at the same rung
  (same cell, output length, repeats) shares the process, so the relative
  variance is pooled over them (each contributes ``n - 1`` degrees of freedom),
  shrunk towards a prior (``prior_cv`` worth ``prior_dof`` degrees of freedom)
  so the first configs are not judged with a near-zero spread;
* **between restarts** (clocks, placement, a cold cache, the load of the
  machine: what repeats inside one restart cannot see): measured from repeated
  restarts of one config, the reference (the inventory's current config), as the
  variance of its per-restart means beyond what their repeats explain. Until
  it is measured, and as a prior worth ``floor_prior_dof`` restarts after, the
  variance is ``floor_cv`` squared (``--noise-floor``);
* **projection** (a short rung's figure projected to the full output length,
  :mod:`repro_py.tune.projection`): the spread, across configs that reached
  both, of the residual between the full rung's figure and the projection,
  beyond what their repeats explain (prior ``projection_cv``).

The interval is ``mean +- z * se`` with ``z`` from the confidence level
(two-sided normal quantile); a config measured in several restarts has the
mean of its per-restart means, with the standard error of that mean.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from statistics import NormalDist

DEFAULT_PRIOR_CV = 0.05
DEFAULT_PRIOR_DOF = 4.0
#: Between-restart noise assumed until the reference's restarts measure it (then a prior worth one restart).
DEFAULT_FLOOR_CV = 0.02
DEFAULT_FLOOR_PRIOR_DOF = 1.0
DEFAULT_PROJECTION_CV = 0.05
DEFAULT_PROJECTION_PRIOR_DOF = 2.0
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


@dataclasses.dataclass(frozen=True)
class Between:
    """The between-restart relative variance in use, and what it rests on."""

    variance: float
    measured: float | None  # the reference restarts' own estimate (variance), None before two restarts
    dof: int  # degrees of freedom of the measurement (restarts of the reference - 1)
    prior_cv: float

    @property
    def cv(self) -> float:
        return math.sqrt(self.variance)

    def text(self) -> str:
        if self.measured is None:
            return f"{self.cv:.1%} (assumed, --noise-floor: the reference has not been restarted twice yet)"
        return (
            f"{self.cv:.1%} (measured {math.sqrt(self.measured):.1%} from {self.dof + 1} restarts of the reference, "
            f"with the --noise-floor prior {self.prior_cv:.1%} worth one)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "cv": round(self.cv, 5),
            "measured_cv": None if self.measured is None else round(math.sqrt(self.measured), 5),
            "restarts": self.dof + 1 if self.measured is not None else None,
            "prior_cv": self.prior_cv,
        }


@dataclasses.dataclass
class NoiseModel:
    """Pooled and measured noise per (rung, metric); see the module docstring."""

    prior_cv: float = DEFAULT_PRIOR_CV
    prior_dof: float = DEFAULT_PRIOR_DOF
    floor_cv: float = DEFAULT_FLOOR_CV
    confidence: float = DEFAULT_CONFIDENCE
    floor_prior_dof: float = DEFAULT_FLOOR_PRIOR_DOF
    projection_cv: float = DEFAULT_PROJECTION_CV
    projection_prior_dof: float = DEFAULT_PROJECTION_PRIOR_DOF
    _pool: dict[tuple[str, str], dict[str, tuple[float, int]]] = dataclasses.field(default_factory=dict)
    #: (rung, metric) -> restart number -> the reference's repeats in that restart
    _restarts: dict[tuple[str, str], dict[int, list[float]]] = dataclasses.field(default_factory=dict)
    #: (rung, metric) -> label -> (log residual full / projected, repeats at the rung, full rung, its repeats)
    _residuals: dict[tuple[str, str], dict[str, tuple[float, int, str, int]]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prior_cv <= 0 or self.prior_dof < 0 or self.floor_cv < 0 or self.projection_cv < 0:
            raise ValueError(
                f"noise model: prior_cv={self.prior_cv} must be > 0, prior_dof={self.prior_dof}, "
                f"floor_cv={self.floor_cv} and projection_cv={self.projection_cv} >= 0"
            )
        self.z = z_for(self.confidence)

    # ------------------------------------------------------------ within a restart

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
        for residuals in self._residuals.values():
            residuals.pop(label, None)

    def rel_variance(self, rung: str, metric: str) -> float:
        pooled = self._pool.get((rung, metric), {})
        num = self.prior_dof * self.prior_cv**2 + sum(var * dof for var, dof in pooled.values())
        den = self.prior_dof + sum(dof for _, dof in pooled.values())
        return num / den if den > 0 else self.prior_cv**2

    def rel_sd(self, rung: str, metric: str) -> float:
        return math.sqrt(self.rel_variance(rung, metric))

    # ------------------------------------------------------------ between restarts

    def observe_restart(self, rung: str, metric: str, restart: int, values: Sequence[float]) -> None:
        """The reference's repeats at ``rung`` in its restart number ``restart`` (1, 2, ...)."""
        if values:
            self._restarts.setdefault((rung, metric), {})[restart] = list(values)

    def forget_restart(self, restart: int) -> None:
        for restarts in self._restarts.values():
            restarts.pop(restart, None)

    def between(self) -> Between:
        """The between-restart variance: the reference's per-restart means (log scale) vary by their
        variance, of which their repeats explain ``within / n``; the rest is between restarts. Averaged
        over the rungs and metrics measured in two or more restarts (which share the restarts, so their
        degrees of freedom are the restarts', not more), then combined with the prior."""
        excess: list[float] = []
        dof = 0
        for (rung, metric), restarts in self._restarts.items():
            groups = [values for values in restarts.values() if values]
            if len(groups) < 2 or any(statistics.fmean(v) <= 0 for v in groups):
                continue
            logs = [math.log(statistics.fmean(v)) for v in groups]
            within = statistics.fmean(self.rel_variance(rung, metric) / len(v) for v in groups)
            excess.append(statistics.variance(logs) - within)
            dof = max(dof, len(groups) - 1)
        prior = self.floor_cv**2
        if not excess:
            return Between(prior, None, 0, self.floor_cv)
        measured = max(0.0, statistics.fmean(excess))
        variance = (self.floor_prior_dof * prior + dof * measured) / (self.floor_prior_dof + dof)
        return Between(variance, measured, dof, self.floor_cv)

    # ------------------------------------------------------------ projection of short rungs

    def observe_projection(
        self, rung: str, metric: str, label: str, projected: Sequence[float], *, full_rung: str, full: Sequence[float]
    ) -> None:
        """A config measured at ``rung`` (projected to the full length) and at the full rung."""
        if not projected or not full or min(*projected, *full) <= 0:
            return
        residual = math.log(statistics.fmean(full)) - math.log(statistics.fmean(projected))
        self._residuals.setdefault((rung, metric), {})[label] = (residual, len(projected), full_rung, len(full))

    def projection(self, rung: str, metric: str) -> tuple[float, float, int]:
        """(mean log residual, variance of one config's residual, configs it rests on) at ``rung``."""
        items = list(self._residuals.get((rung, metric), {}).values())
        mean = statistics.fmean(r[0] for r in items) if items else 0.0
        measured, dof = 0.0, 0
        if len(items) >= 2:
            within = statistics.fmean(
                self.rel_variance(rung, metric) / n + self.rel_variance(full, metric) / n_full
                for _, n, full, n_full in items
            )
            measured, dof = max(0.0, statistics.variance([r[0] for r in items]) - within), len(items) - 1
        prior = self.projection_prior_dof * self.projection_cv**2
        return mean, (prior + dof * measured) / (self.projection_prior_dof + dof), len(items)

    # ------------------------------------------------------------ estimates

    def estimate(self, rung: str, metric: str, values: Sequence[float], *, projected: bool = False) -> Estimate | None:
        """The estimate from one config's repeats in one restart (``None`` without a single valid repeat);
        ``projected``: the values are a short rung's projection, which adds the projection's noise."""
        if not values:
            return None
        mean = statistics.fmean(values)
        rel_var = self.rel_variance(rung, metric) / len(values) + self.between().variance
        if projected:
            rel_var += self.projection(rung, metric)[1]
        return Estimate(mean=mean, se=abs(mean) * math.sqrt(rel_var), n=len(values), z=self.z)

    def combined(self, estimates: Sequence[Estimate]) -> Estimate | None:
        """One config measured in several restarts: the mean of the per-restart means, and its error."""
        if not estimates:
            return None
        k = len(estimates)
        mean = statistics.fmean(e.mean for e in estimates)
        se = math.sqrt(sum(e.se**2 for e in estimates)) / k
        return Estimate(mean=mean, se=se, n=sum(e.n for e in estimates), z=self.z)
