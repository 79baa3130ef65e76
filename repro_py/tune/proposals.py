"""Which config to restart next.

Order of proposals:

1. the autoregressive baseline, when the space has it: it is the lossless
   reference every later config's outputs are compared with (as in a sweep);
2. the inventory's current config (``sweep_default_config``), the one to beat;
3. an initial design: the configs farthest (maximin, in the surrogate's
   feature space) from those measured so far, until ``init_design``
   speculative configs are in;
4. then, per objective, the unmeasured config with the highest upper
   confidence bound (``kappa`` standard deviations) of the surrogate of its
   screened figure; the objective whose candidate promises the largest gain
   over its current winner goes next;
5. when no candidate promises more than ``min_gain``: the current winners'
   unmeasured neighbours (one step in one setting), since a smooth surrogate
   can round off a sharp optimum.

Configs that behave the same for every objective of the run (same features)
are restarted once. The search stops when the space is exhausted or nothing
is left to check; the loop enforces the budgets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from repro_py.tune.objectives import Objective
from repro_py.tune.records import GATES_FAIL
from repro_py.tune.surrogate import Observation, Surrogate, accept_features, step_features
from repro_py.tune.sweepio import PlannedConfig

if TYPE_CHECKING:
    from repro_py.tune.search import Search


@dataclasses.dataclass(frozen=True)
class Proposal:
    cfg: PlannedConfig
    reason: str
    objective: str | None = None
    predicted: float | None = None  # surrogate mean (screen scale), tok/s
    upper: float | None = None


def equivalence_key(search: Search, cfg: PlannedConfig) -> tuple[object, ...]:
    """Configs with the same key behave the same for every objective of this run (e.g. a 2048-token draft
    window and a full draft cache at a 60-token context): only one of them is ever restarted."""
    parts: list[object] = [cfg.spec.algorithm, cfg.sim_fault]
    if cfg.spec.algorithm != "none":
        for obj in search.settings.objectives:
            parts += [*accept_features(cfg.spec, obj.cell.context), *step_features(cfg.spec, obj.cell.context)]
    return tuple(parts)


def unmeasured(search: Search) -> list[PlannedConfig]:
    measured = {equivalence_key(search, r.cfg) for r in search.records.values()}
    return [
        c for c in search.space.configs if c.label not in search.records and equivalence_key(search, c) not in measured
    ]


def features(search: Search, cfgs: Sequence[PlannedConfig]) -> np.ndarray[Any, np.dtype[np.float64]]:
    context = max(o.cell.context for o in search.settings.objectives)
    return np.array([[*accept_features(c.spec, context), math.log2(c.spec.verify_width)] for c in cfgs])


def maximin(search: Search, pool: list[PlannedConfig]) -> PlannedConfig:
    chosen = [r.cfg for r in search.records.values() if r.cfg.spec.algorithm != "none"]
    if not chosen:
        return pool[0]
    dist = np.min(
        np.linalg.norm(features(search, pool)[:, None, :] - features(search, chosen)[None, :, :], axis=2), axis=1
    )
    return pool[int(np.argmax(dist))]


def observations(search: Search, obj: Objective) -> list[Observation]:
    out: list[Observation] = []
    rel_se = math.sqrt(
        search.noise.rel_variance(search.screen, obj.key) / max(1, search.settings.ladder[0].repeats)
        + search.noise.floor_cv**2
    )
    for rec in search.records.values():
        data = rec.rung(search.screen)
        if data is None or obj.key not in data.tps or rec.gates == GATES_FAIL:
            continue
        values = data.tps[obj.key]
        out.append(
            Observation(
                rec.cfg.spec, sum(values) / len(values), data.accept.get(obj.key), data.step_ms.get(obj.key), rel_se
            )
        )
    return out


def fit_surrogates(search: Search) -> dict[str, Surrogate]:
    """Fit (or refit) the surrogate of every objective on the screened configs so far (for the report)."""
    for obj in search.settings.objectives:
        with contextlib.suppress(np.linalg.LinAlgError):
            search.surrogates[obj.key] = Surrogate(obj.cell.context, obj.cell.concurrency).fit(
                observations(search, obj)
            )
    return search.surrogates


def local_check(search: Search, pool: list[PlannedConfig]) -> Proposal | None:
    """Before stopping: a neighbour of a current winner that was never measured (the surrogate is smooth
    and can round off a sharp optimum; one step in each setting around the winner checks it)."""
    open_labels = {c.label for c in pool}
    for obj in search.settings.objectives:
        ranked = search.ranked(obj)
        if not ranked:
            continue
        winner = ranked[0][0].cfg
        near = [c for c in search.space.neighbours(winner) if c.label in open_labels]
        if not near:
            continue
        surrogate = search.surrogates.get(obj.key)
        if surrogate is not None and surrogate.fitted:
            mu, sd = surrogate.predict([c.spec for c in near])
            pick = near[int(np.argmax(mu + search.settings.kappa * sd))]
        else:
            pick = near[0]
        return Proposal(
            pick, f"local check for {obj.key}: a neighbour of the winner {winner.label} not yet measured", obj.key
        )
    return None


def propose(search: Search) -> Proposal | None:
    pool = unmeasured(search)
    if not pool:
        search.stop_reason = (
            "every config of the space was measured (or one that behaves the same for these objectives)"
        )
        return None
    baseline = next((c for c in pool if c.spec.algorithm == "none"), None)
    if baseline is not None:
        return Proposal(baseline, "lossless reference: the autoregressive baseline runs first, as in a sweep")
    if search.default is not None and search.default.label not in search.records:
        return Proposal(search.default, "the inventory's current config (the one to beat)")
    speculative = [c for c in pool if c.spec.algorithm != "none"]
    measured = sum(1 for r in search.records.values() if r.cfg.spec.algorithm != "none")
    if measured < search.settings.init_design:
        return Proposal(maximin(search, speculative), "initial design: the config farthest from those measured")
    best: tuple[float, Proposal] | None = None
    for obj in search.settings.objectives:
        try:
            surrogate = Surrogate(obj.cell.context, obj.cell.concurrency).fit(observations(search, obj))
        except np.linalg.LinAlgError as exc:
            return Proposal(maximin(search, speculative), f"space-filling: the surrogate could not be fitted ({exc})")
        search.surrogates[obj.key] = surrogate
        if not surrogate.fitted:
            return Proposal(maximin(search, speculative), "initial design: too few screened configs to fit")
        mu, sd = surrogate.predict([c.spec for c in speculative])
        upper = np.exp(mu + search.settings.kappa * sd)
        index = int(np.argmax(upper))
        ranked = search.ranked(obj)
        if ranked:
            inc_mu, _ = surrogate.predict([ranked[0][0].cfg.spec])
            incumbent = float(np.exp(inc_mu[0]))
            gain = float(upper[index]) / incumbent - 1.0
            why = f"{gain:+.1%} over its {incumbent:.1f} for the winner so far {ranked[0][0].label}"
        else:
            gain, why = math.inf, "no winner yet"
        proposal = Proposal(
            speculative[index],
            f"surrogate ({surrogate.mode}) for {obj.key}: predicted {math.exp(mu[index]):.1f} tok/s, upper bound "
            f"{upper[index]:.1f}, {why}",
            obj.key,
            math.exp(mu[index]),
            float(upper[index]),
        )
        if best is None or gain > best[0]:
            best = (gain, proposal)
    assert best is not None
    if best[0] <= search.settings.min_gain:
        local = local_check(search, pool)
        if local is not None:
            return local
        search.stop_reason = (
            f"converged: no unmeasured config's upper bound ({search.settings.kappa:g} sd) beats the current "
            f"winner of any objective by more than {search.settings.min_gain:.0%}, and every neighbour of each "
            "winner was measured"
        )
        return None
    return best[1]
