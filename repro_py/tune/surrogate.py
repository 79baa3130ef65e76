"""A surrogate of tokens/s over the space, from the configs screened so far.

Tokens per second of a speculative config is acceptance over step time:
``tok/s = C x accept / step``. The two parts depend on different settings:

* the acceptance length (from the server's counters: generated tokens per
  verify step) depends on the tree's shape: budget, top-K cap, block size,
  how much context the drafter sees (its window) and chain vs tree;
* the step time depends on how many tokens one verify step pushes through the
  target (budget + 1 for a tree, the block for a chain), the block size
  (drafter cost) and the draft context, *not* on top-K.

So a config screened at budget 8 / top-K 4 tells the step time of every
top-K at budget 8, and the acceptances of neighbouring trees; a model of
tokens/s over (budget, top-K, acceptance) proposes configs that were never
run. Each part is a Gaussian-process regression (squared-exponential kernel
on log2 budget, log2 top-K, block, log2 of the draft-context share, a
full-draft-cache flag, a chain flag; a constant mean, so that away from the
measured configs the prediction returns to their mean and only the
uncertainty grows; per-point noise from the pooled measurement noise of that
part; one length-scale multiplier and the signal variance chosen by marginal likelihood) fitted to
the log of the screened figures. The prediction for a config is the log
tok/s mean and standard deviation; the search ranks unmeasured configs by
their upper confidence bound.

When a cell has no acceptance (a real server without metrics, the
autoregressive baseline) the surrogate models log tok/s directly on the
union of the features.

Several hosts measuring at once (a fleet) propose while other configs are still in flight: the surrogate then
*believes* each of them at its own predicted mean (:meth:`Surrogate.believing`, the kriging believer: the
pseudo-observations shrink the uncertainty around them, the kernel unchanged), so the next proposal looks
elsewhere instead of beside a config already being measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from repro_py.spec_config import SpecConfig

Array = npt.NDArray[np.float64]
TRAINED_BLOCK = 8
#: The drafter's trained sliding window (field facts: 2048 tokens, 5 sliding-attention layers).
TRAINED_WINDOW = 2048
_SCALES = (0.5, 0.7, 1.0, 1.4, 2.0)
_SIGNALS = (0.5, 1.0, 2.0, 4.0)
#: the variance of a believed pseudo-observation (log scale): as certain as a well-measured config
_BELIEVED_NOISE = 1e-4


def budget_equivalent(spec: SpecConfig) -> tuple[float, float, float]:
    """(budget, top-K, chain flag): a DFlash chain is a tree of budget block-1 and top-K 1."""
    if spec.algorithm == "dflash":
        assert spec.block_size is not None
        return float(spec.block_size - 1), 1.0, 1.0
    assert spec.budget is not None and spec.topk is not None
    return float(spec.budget), float(spec.topk), 0.0


def max_depth(spec: SpecConfig) -> float:
    """Most drafted tokens one verify step can accept: a tree of ``budget`` nodes is at most that deep, and no
    deeper than the block's ``block - 1`` draft positions (a chain: ``block - 1``)."""
    budget, _, _ = budget_equivalent(spec)
    assert spec.block_size is not None
    return float(min(budget, spec.block_size - 1))


def draft_share(spec: SpecConfig, context: int) -> float:
    """log2 of the share of the context the drafter sees (0 when its window covers the context)."""
    if spec.window is None or spec.window >= context:
        return 0.0
    return math.log2(spec.window / context)


def full_cache(spec: SpecConfig, context: int) -> float:
    """A full draft cache differs from a sliding window only when the context is longer than the trained window
    (below it the drafter attends to the same tokens either way)."""
    return 0.5 if spec.window is None and context > TRAINED_WINDOW else 0.0


def accept_features(spec: SpecConfig, context: int) -> list[float]:
    budget, topk, chain = budget_equivalent(spec)
    return [
        math.log2(budget),
        math.log2(topk),
        1.0 if spec.block_size != TRAINED_BLOCK else 0.0,
        draft_share(spec, context),
        full_cache(spec, context),
        chain,
    ]


def step_features(spec: SpecConfig, context: int) -> list[float]:
    return [
        math.log2(spec.verify_width),
        1.0 if spec.block_size != TRAINED_BLOCK else 0.0,
        draft_share(spec, context),
        full_cache(spec, context),
    ]


def joint_features(spec: SpecConfig, context: int) -> list[float]:
    return [*accept_features(spec, context), math.log2(spec.verify_width)]


@dataclasses.dataclass
class GaussianProcess:
    """GP regression: a constant mean (the observations' own), squared-exponential kernel, per-point noise.

    Far from every observation the prediction falls back to that mean with the full signal variance: a
    trend fitted to a handful of points would carry a slope into settings nothing measured (a linear trend in
    log2 budget predicted deep block-16 trees at twice what they measured)."""

    scale: float = 1.0
    signal: float = 1.0
    _x: Array | None = None
    _y: Array | None = None
    _noise: Array | None = None
    _alpha: Array | None = None
    _chol: Array | None = None
    _mean: float = 0.0

    def _kernel(self, a: Array, b: Array) -> Array:
        d = (a[:, None, :] - b[None, :, :]) / self.scale
        out: Array = self.signal * np.exp(-0.5 * np.sum(d * d, axis=2))
        return out

    def _fit_fixed(self, x: Array, y: Array, noise: Array) -> float:
        mean = float(y.mean())
        resid = y - mean
        k = self._kernel(x, x) + np.diag(noise + 1e-9)
        chol = np.asarray(np.linalg.cholesky(k), dtype=np.float64)
        alpha: Array = np.linalg.solve(chol.T, np.linalg.solve(chol, resid))
        self._x, self._y, self._noise, self._alpha, self._chol, self._mean = x, y, noise, alpha, chol, mean
        return float(-0.5 * resid @ alpha - np.sum(np.log(np.diag(chol))) - 0.5 * len(x) * math.log(2 * math.pi))

    def fit(self, x: Array, y: Array, noise: Array) -> GaussianProcess:
        """Choose the length-scale multiplier and signal variance by marginal likelihood, then fit."""
        spread = float(np.var(y)) if len(y) > 1 else 0.01
        best: tuple[float, float, float] | None = None
        for scale in _SCALES:
            for mult in _SIGNALS:
                self.scale, self.signal = scale, max(spread, 1e-4) * mult
                try:
                    lml = self._fit_fixed(x, y, noise)
                except np.linalg.LinAlgError:
                    continue
                if best is None or lml > best[0]:
                    best = (lml, self.scale, self.signal)
        if best is None:
            raise np.linalg.LinAlgError("no kernel setting gave a positive-definite covariance")
        self.scale, self.signal = best[1], best[2]
        self._fit_fixed(x, y, noise)
        return self

    def believing(self, xs: Array) -> GaussianProcess:
        """A copy that also "observed" ``xs`` at its own predicted mean (almost no noise), the length scale and
        signal kept: the mean is unchanged near them, the uncertainty shrinks around them."""
        assert self._x is not None and self._y is not None and self._noise is not None
        if not len(xs):
            return self
        mean, _ = self.predict(xs)
        out = GaussianProcess(scale=self.scale, signal=self.signal)
        out._fit_fixed(np.vstack([self._x, xs]), np.concatenate([self._y, mean]),
                       np.concatenate([self._noise, np.full(len(xs), _BELIEVED_NOISE)]))  # fmt: skip
        return out

    def predict(self, xs: Array) -> tuple[Array, Array]:
        assert self._x is not None and self._alpha is not None and self._chol is not None
        ks = self._kernel(xs, self._x)
        mean = self._mean + ks @ self._alpha
        v = np.linalg.solve(self._chol, ks.T)
        var = np.maximum(self.signal - np.sum(v * v, axis=0), 1e-12)
        return mean, np.sqrt(var)


@dataclasses.dataclass(frozen=True)
class Observation:
    """One screened config at one objective's cell."""

    spec: SpecConfig
    tps: float  # the measured figure (aggregate output tok/s, first token included)
    accept: float | None  # acceptance length from the counters
    step_ms: float | None  # decode step time (time per token x acceptance, repro_py.tune.objectives.step_values)
    rel_se: float  # relative standard error of tps (log-space sd)
    accept_rel_se: float | None = None  # relative standard error of the acceptance length (None: rel_se)
    step_rel_se: float | None = None  # relative standard error of the step time (None: rel_se)


@dataclasses.dataclass
class Surrogate:
    """log tok/s over the space for one cell; :meth:`fit` then :meth:`predict`."""

    context: int
    concurrency: int
    mode: str = "unfitted"  # "acceptance/step" | "direct" | "unfitted"
    _parts: list[tuple[GaussianProcess, str]] = dataclasses.field(default_factory=list)

    def _x(self, specs: Sequence[SpecConfig], kind: str) -> Array:
        rows = {
            "accept": accept_features,
            "step": step_features,
            "direct": joint_features,
        }[kind]
        return np.array([rows(s, self.context) for s in specs], dtype=float)

    def fit(self, observations: Sequence[Observation]) -> Surrogate:
        obs = [o for o in observations if o.spec.algorithm != "none" and o.tps > 0]
        self._parts = []
        if len(obs) < 2:
            self.mode = "unfitted"
            return self
        noise = np.array([max(o.rel_se, 1e-3) ** 2 for o in obs])
        specs = [o.spec for o in obs]
        if all(o.accept is not None and o.accept >= 1.0 and o.step_ms is not None and o.step_ms > 0 for o in obs):
            # the model is of the acceptance *per available draft depth*: (accept - 1) / max depth, in (0, 1]
            log_acc = np.array([math.log(max(float(o.accept or 1.0) - 1.0, 0.05) / max_depth(o.spec)) for o in obs])
            log_step = np.array([math.log(float(o.step_ms or 1.0)) for o in obs])
            # each part's own measured noise; log(accept - 1) moves accept / (accept - 1) times as much as log accept
            noise_acc = np.array(
                [
                    (max(o.rel_se if o.accept_rel_se is None else o.accept_rel_se, 1e-3) * a / max(a - 1.0, 0.05)) ** 2
                    for o in obs
                    if (a := float(o.accept or 1.0))
                ]
            )
            noise_step = np.array([max(o.rel_se if o.step_rel_se is None else o.step_rel_se, 1e-3) ** 2 for o in obs])
            self._parts = [
                (GaussianProcess().fit(self._x(specs, "accept"), log_acc, noise_acc), "accept"),
                (GaussianProcess().fit(self._x(specs, "step"), log_step, noise_step), "step"),
            ]
            self.mode = "acceptance/step"
        else:
            log_tps = np.array([math.log(o.tps) for o in obs])
            self._parts = [(GaussianProcess().fit(self._x(specs, "direct"), log_tps, noise), "direct")]
            self.mode = "direct"
        return self

    def believing(self, specs: Sequence[SpecConfig]) -> Surrogate:
        """A copy of this fitted surrogate that believes each of ``specs`` (configs in flight) at its own
        predicted mean, part by part (the kriging believer); unchanged when ``specs`` is empty."""
        if not specs or not self._parts:
            return self
        parts = [(gp.believing(self._x(specs, kind)), kind) for gp, kind in self._parts]
        return Surrogate(self.context, self.concurrency, self.mode, parts)

    @property
    def fitted(self) -> bool:
        return bool(self._parts)

    def predict(self, specs: Sequence[SpecConfig]) -> tuple[Array, Array]:
        """Mean and standard deviation of log tok/s for each spec (baseline and non-speculative excluded).

        In acceptance/step mode this is the decode rate ``C x accept / step`` (first token left out): a
        ranking of configs on the scale of the surrogate, compared only with its own prediction for the
        current winner."""
        if not self._parts:
            raise RuntimeError("the surrogate is not fitted")
        if self.mode == "direct":
            gp, kind = self._parts[0]
            return gp.predict(self._x(specs, kind))
        (acc_gp, _), (step_gp, _) = self._parts
        eff_mu, eff_sd = acc_gp.predict(self._x(specs, "accept"))
        step_mu, step_sd = step_gp.predict(self._x(specs, "step"))
        gain = np.array([max_depth(s) for s in specs]) * np.exp(eff_mu)  # accept - 1
        acc_mu = np.log1p(gain)
        acc_sd = eff_sd * gain / (1.0 + gain)  # delta method: d log(1 + g) = g / (1 + g) d log g
        return math.log(1000.0 * self.concurrency) + acc_mu - step_mu, np.sqrt(acc_sd**2 + step_sd**2)

    def describe(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "parts": [
                {"target": kind, "length_scale_multiplier": gp.scale, "signal_variance": round(gp.signal, 6)}
                for gp, kind in self._parts
            ],
        }
