"""Which config to restart next.

Order of proposals:

1. the autoregressive baseline, when the space has it: it is the lossless
   reference every later config's outputs are compared with (as in a sweep);
2. the inventory's current config (``sweep_default_config``), the one to beat;
3. an initial design: the configs farthest (maximin, in the surrogate's
   feature space) from those measured so far, until ``init_design``
   speculative configs are in (the current config counts: two are the
   design's);
4. the current config again (``reference_restarts`` in all): the spread of its
   restarts is the between-restart noise (:mod:`repro_py.tune.noise`). It
   comes after the initial design, so the restarts are apart in time, or
   sooner when the remaining budget would otherwise not reach it;
5. then, per objective, the unmeasured config with the highest upper
   confidence bound (``kappa`` standard deviations) of the surrogate of its
   screened figure, among the configs of its *trust region*: those within
   ``trust_radius`` of the objective's winner so far in the surrogate's
   features (each scaled to the space's range; widened by half until it holds
   a candidate). A surrogate fitted to a dozen configs is a local model: away
   from them it knows only its mean, and a bound taken over the whole space
   spends the few restarts on far corners whose width, not their promise, makes
   them look good. The objective whose candidate promises the largest gain over
   its current winner goes next. While any unmeasured config has *new settings*
   (a budget, block, draft window or algorithm that no measured config has
   together; top-K left out), the candidates are those, each setting at the
   top-K that the fewest measured configs have, the one the surrogate predicts
   best among those: the step time does not depend on top-K, so such a config
   teaches both parts of the surrogate and a top-K variant of a measured one
   only the acceptance; the bound, least sure of the top-K values it has seen
   least, would otherwise spend the restarts stepping top-K at the budgets it
   has measured, or probe a new setting at the far end of the top-K range; and
   the mean alone, early in a run, puts every new setting at the top-K of the
   few configs measured, the current config's (on the measured grids of M and
   P every new setting went to top-K 3 or 4 and the optimum, top-K 1 or 2,
   was never measured);
6. when no candidate of a trust region promises more than ``min_gain``: a
   *local check*, the current winner's unmeasured neighbour (one step in one
   setting) that the surrogate knows least (the widest standard deviation), since
   a smooth surrogate can round off a sharp optimum: the check is there for
   where the surrogate may be wrong, so its mean does not choose it (with
   ``local_check_least_known`` off, the previous release's rule: the neighbour
   with the highest bound, which on replays of measured grids spent the check
   on the neighbour the surrogate already rated, a step up in budget, and left
   the sharp optimum a step down unmeasured);
7. when no neighbour is left: the best bound over the whole space, when it
   promises more than ``min_gain``;
8. with a restart the budget would leave unused (a gated candidate takes two
   restarts with its lossless gate's own, one is left) or before the search
   stops, a *confirmation* (``confirm_restarts`` at most): a repeated restart
   of a leader that the run's confidence does not separate from the winner so
   far (the one of them restarted least, the better first), so that a winner
   is less often the luckiest of several near-equal configs measured once; a
   config's figure is the mean over its restarts. None is made when the
   winner is ahead of every other config at the run's confidence. A
   confirmation never takes a restart a new candidate could have had: spent
   earlier, on the performance model, they cost the search more configs
   within 2% of the optimum than they saved in the pick.

Configs that are the same for this run are restarted once: they differ only in
a draft window that covers every token of every sequence the run measures (its
longest prompt, with the benchmark's prompt tolerance, plus the full rung's
output tokens), which makes the drafter attend to exactly what a full draft
cache would. Nothing else is assumed equal. The search stops when the space is
exhausted or nothing is left to check; the loop enforces the budgets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from repro_py.bench.prompts import prompt_tolerance
from repro_py.spec_config import SpecConfig
from repro_py.tune.objectives import Objective
from repro_py.tune.records import GATES_FAIL, MEASURING, Proposal
from repro_py.tune.repeats import confirmation, reference_repeat
from repro_py.tune.search import Search
from repro_py.tune.surrogate import Observation, Surrogate, accept_features
from repro_py.tune.sweepio import PlannedConfig


def longest_sequence(search: Search) -> int:
    """The most tokens any sequence of this run holds: the longest prompt (with the benchmark's tolerance
    on the prompt length) plus the full rung's output tokens."""
    return max(c.context + prompt_tolerance(c.context) for c in search.cells()) + search.settings.final.max_tokens


def equivalence_key(search: Search, cfg: PlannedConfig) -> tuple[object, ...]:
    """Configs with the same key are the same for this run: they differ at most in a draft window that covers
    every token of every sequence the run measures (then the drafter attends to what a full draft cache holds).
    Only one of them is ever restarted."""
    spec = cfg.spec
    window = None if spec.window is None or spec.window >= longest_sequence(search) else spec.window
    return (cfg.sim_fault, dataclasses.replace(spec, window=window))


def settings_key(search: Search, cfg: PlannedConfig) -> tuple[object, ...]:
    """What a config sets apart from its top-K cap (a draft window that covers the run read as a full cache,
    as in :func:`equivalence_key`)."""
    fault, spec = equivalence_key(search, cfg)
    assert isinstance(spec, SpecConfig)
    return (fault, dataclasses.replace(spec, topk=None))


def new_settings(search: Search, surrogate: Surrogate, candidates: list[PlannedConfig]) -> list[PlannedConfig]:
    """Of the candidates whose settings apart from top-K no config measured (or being measured) has, per such
    setting one: at the top-K the fewest measured speculative configs have, of those the one ``surrogate``
    predicts best (its mean, not its bound: the bound's widest is the top-K it knows least, the far end of the
    range); with ``new_settings_topk_balanced`` off, at the top-K the surrogate predicts best."""
    seen = {settings_key(search, r.cfg) for r in search.records.values()}
    fresh = [c for c in candidates if settings_key(search, c) not in seen]
    if not fresh:
        return []
    count: dict[int | None, int] = {}
    if search.settings.new_settings_topk_balanced:
        for rec in search.records.values():
            if rec.restart == 1 and rec.cfg.spec.algorithm != "none":
                count[rec.cfg.spec.topk] = count.get(rec.cfg.spec.topk, 0) + 1
    mu, _ = surrogate.predict([c.spec for c in fresh])
    best: dict[tuple[object, ...], tuple[tuple[int, float], PlannedConfig]] = {}
    for cfg, mean in zip(fresh, mu, strict=True):
        key = settings_key(search, cfg)
        score = (-count.get(cfg.spec.topk, 0), float(mean))
        if key not in best or score > best[key][0]:
            best[key] = (score, cfg)
    return [cfg for _, cfg in best.values()]


def unmeasured(search: Search) -> list[PlannedConfig]:
    measured = {equivalence_key(search, r.cfg) for r in search.records.values()}
    return [
        c for c in search.space.configs if c.label not in search.records and equivalence_key(search, c) not in measured
    ]


def features(search: Search, cfgs: Sequence[PlannedConfig]) -> np.ndarray[Any, np.dtype[np.float64]]:
    context = longest_sequence(search)
    return np.array([[*accept_features(c.spec, context), math.log2(c.spec.verify_width)] for c in cfgs])


def maximin(search: Search, pool: list[PlannedConfig]) -> PlannedConfig:
    chosen = [r.cfg for r in search.records.values() if r.cfg.spec.algorithm != "none"]
    if not chosen:
        return pool[0]
    dist = np.min(
        np.linalg.norm(features(search, pool)[:, None, :] - features(search, chosen)[None, :, :], axis=2), axis=1
    )
    return pool[int(np.argmax(dist))]


def scaled_features(search: Search, cfgs: Sequence[PlannedConfig]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The surrogate's features of ``cfgs``, each scaled to the range the space's speculative configs span
    (0..1; a feature the space does not vary is 0)."""
    every = features(search, [c for c in search.space.configs if c.spec.algorithm != "none"])
    low, high = every.min(axis=0), every.max(axis=0)
    span = np.where(high > low, high - low, 1.0)
    out: np.ndarray[Any, np.dtype[np.float64]] = (features(search, cfgs) - low) / span
    return out


def trust_region(
    search: Search, obj: Objective, candidates: list[PlannedConfig]
) -> tuple[list[PlannedConfig], float | None]:
    """The candidates within the trust radius of ``obj``'s speculative winner so far (root mean square of the
    scaled feature differences), the radius widened by half until one is inside; all of them, and None, when
    nothing speculative has won yet."""
    winner = next((rec for rec, _ in search.ranked(obj) if rec.cfg.spec.algorithm != "none"), None)
    if winner is None or not candidates:
        return candidates, None
    centre = scaled_features(search, [winner.cfg])[0]
    dist = np.sqrt(np.mean((scaled_features(search, candidates) - centre) ** 2, axis=1))
    radius = search.settings.trust_radius
    while not np.any(dist <= radius):
        radius *= 1.5
    return [c for c, d in zip(candidates, dist, strict=True) if d <= radius], radius


def observations(search: Search, obj: Objective) -> list[Observation]:
    """Each config's highest rung for ``obj``: the full rung's figure, else its projection to the full length
    (corrected by the mean residual of projections at that rung), with acceptance and step time there."""
    out: list[Observation] = []
    for rec in search.records.values():
        if rec.restart > 1 or rec.gates == GATES_FAIL:
            continue
        data = next((r for r in reversed(rec.rungs) if obj.key in r.tps), None)
        est = None if data is None else search.estimate(rec, data.name, obj.key)
        if data is None or est is None or est.mean <= 0:
            continue
        bias = search.noise.projection(data.name, obj.key)[0] if obj.key in data.measured_tps else 0.0
        n_acc, n_step = len(data.accept_values.get(obj.key) or ()), len(data.step_values.get(obj.key) or ())
        noise = search.noise
        out.append(
            Observation(
                rec.cfg.spec,
                est.mean * math.exp(bias),
                data.accept.get(obj.key),
                data.step_ms.get(obj.key),
                est.se / est.mean,
                # the acceptance is counted by the server; the step is timed, so restarts move it too
                math.sqrt(noise.rel_variance(data.name, f"{obj.key}:accept") / n_acc) if n_acc else None,
                math.sqrt(noise.rel_variance(data.name, f"{obj.key}:step") / n_step + noise.between().variance)
                if n_step
                else None,
            )
        )
    return out


def in_flight(search: Search, obj: Objective) -> list[SpecConfig]:
    """Speculative configs being measured (on other hosts of a fleet) with no figure for ``obj`` yet: the
    surrogate believes them at its predictions, so a proposal does not land beside one of them."""
    return [
        r.cfg.spec for r in search.records.values()
        if r.status == MEASURING and r.cfg.spec.algorithm != "none" and not any(obj.key in d.tps for d in r.rungs)
    ]  # fmt: skip


def surrogate_for(search: Search, obj: Objective) -> Surrogate:
    """An unfitted surrogate of ``obj``'s cell, its window features at the run's longest sequence."""
    return Surrogate(longest_sequence(search), obj.cell.concurrency)


def fit_surrogates(search: Search) -> dict[str, Surrogate]:
    """Fit (or refit) the surrogate of every objective on the screened configs so far (for the report)."""
    for obj in search.settings.objectives:
        with contextlib.suppress(np.linalg.LinAlgError):
            search.surrogates[obj.key] = surrogate_for(search, obj).fit(observations(search, obj))
    return search.surrogates


def local_check(search: Search, pool: list[PlannedConfig]) -> Proposal | None:
    """A neighbour of a current winner that was never measured (the surrogate is smooth and can round off a
    sharp optimum; one step in each setting around the winner checks it): the one the surrogate knows least,
    or, with ``local_check_least_known`` off, the one with the highest upper bound."""
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
        how = ""
        if surrogate is not None and surrogate.fitted:
            mu, sd = surrogate.predict([c.spec for c in near])
            if search.settings.local_check_least_known:
                index = int(np.argmax(sd))
                how = f", the one the surrogate knows least (sd {sd[index]:.3f} of {len(near)})"
            else:
                index = int(np.argmax(mu + search.settings.kappa * sd))
                how = f", the one with the highest upper bound (of {len(near)})"
            pick = near[index]
        else:
            pick = near[0]
        return Proposal(
            pick, f"local check for {obj.key}: a neighbour of the winner {winner.label} not yet measured{how}",
            obj.key,
        )
    return None


def propose(search: Search, remaining: int | None = None, per_config: int = 1) -> Proposal | None:
    """The next config to restart, or None (``search.stop_reason`` says why); ``remaining``: restarts left for
    configs (the restore already set aside), when the budget counts restarts; ``per_config``: the restarts
    a gated candidate may take."""
    pool = unmeasured(search)
    baseline = next((c for c in pool if c.spec.algorithm == "none"), None)
    if baseline is not None and (search.default is None or search.default.spec.algorithm != "none"):
        return Proposal(baseline, "lossless reference: the autoregressive baseline runs first, as in a sweep")
    if search.default is not None and search.default.label not in search.records:
        return Proposal(search.default, "the inventory's current config (the one to beat)")
    repeat = reference_repeat(search, remaining, per_config)
    if repeat is not None:
        return repeat
    confirm = confirmation(search, remaining, per_config)
    if confirm is not None:
        return confirm
    if not pool:
        return _stop(search, "every config of the space was measured (or one that is the same for this run)")
    speculative = [c for c in pool if c.spec.algorithm != "none"]
    measured = sum(1 for r in search.records.values() if r.cfg.spec.algorithm != "none" and r.restart == 1)
    if measured < search.settings.init_design:
        return Proposal(maximin(search, speculative), "initial design: the config farthest from those measured")
    fitted: dict[str, Surrogate] = {}
    for obj in search.settings.objectives:
        try:
            surrogate = surrogate_for(search, obj).fit(observations(search, obj))
        except np.linalg.LinAlgError as exc:
            return Proposal(maximin(search, speculative), f"space-filling: the surrogate could not be fitted ({exc})")
        search.surrogates[obj.key] = surrogate
        if not surrogate.fitted:
            return Proposal(maximin(search, speculative), "initial design: too few screened configs to fit")
        fitted[obj.key] = surrogate
    fresh_first = search.settings.new_settings_first
    best = best_bound(search, fitted, speculative, local=True, fresh_first=fresh_first)
    if best[0] > search.settings.min_gain:
        return best[1]
    local = local_check(search, pool)
    if local is not None:
        return local
    best = best_bound(search, fitted, speculative, local=False, fresh_first=fresh_first)
    if fresh_first and best[0] <= search.settings.min_gain:
        best = best_bound(search, fitted, speculative, local=False)
    if best[0] <= search.settings.min_gain:
        return _stop(
            search,
            f"converged: no unmeasured config's upper bound ({search.settings.kappa:g} sd) beats the current "
            f"winner of any objective by more than {search.settings.min_gain:.0%}, and every neighbour of each "
            "winner was measured",
        )
    return best[1]


def best_bound(
    search: Search,
    surrogates: dict[str, Surrogate],
    speculative: list[PlannedConfig],
    *,
    local: bool,
    fresh_first: bool = False,
) -> tuple[float, Proposal]:
    """(gain, proposal): over the objectives, the candidate whose upper bound promises the largest gain over
    that objective's winner so far; among each objective's trust region (``local``) or the whole space; with
    ``fresh_first``, among the objective's :func:`new_settings` while there are any."""
    best: tuple[float, Proposal] | None = None
    for obj in search.settings.objectives:
        surrogate = surrogates[obj.key]
        fresh = new_settings(search, surrogate, speculative) if fresh_first else []
        at = ("the top-K fewest measured configs have" if search.settings.new_settings_topk_balanced
              else "its best predicted top-K")  # fmt: skip
        among = f", a setting apart from top-K that no measured config has, at {at}" if fresh else ""
        pool = fresh or speculative
        candidates, radius = trust_region(search, obj, pool) if local else (pool, None)
        flying = in_flight(search, obj)
        mu, sd = surrogate.believing(flying).predict([c.spec for c in candidates])
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
        where = (
            "anywhere in the space" if radius is None
            else f"within {radius:.2f} of the winner so far ({len(candidates)} configs)"
        ) + among  # fmt: skip
        proposal = Proposal(
            candidates[index],
            f"surrogate ({surrogate.mode}) for {obj.key}, {where}: predicted {math.exp(mu[index]):.1f} tok/s, "
            f"upper bound {upper[index]:.1f}, {why}"
            + (f" ({len(flying)} in flight believed at their predictions)" if flying else ""),
            obj.key,
            math.exp(mu[index]),
            float(upper[index]),
        )
        if best is None or gain > best[0]:
            best = (gain, proposal)
    assert best is not None
    return best


def _stop(search: Search, reason: str) -> Proposal | None:
    """Nothing is left to search: the reference's restarts still due come first, then the search stops."""
    repeat = reference_repeat(search, 0)
    if repeat is not None:
        return repeat
    confirm = confirmation(search, None, stopping=True)
    if confirm is not None:
        return confirm
    search.stop_reason = reason
    return None
