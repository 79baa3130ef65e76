"""The surrogate of tok/s: acceptance over step time, learnt from screened configs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repro_py.spec_config import validate
from repro_py.tune.objectives import step_ms
from repro_py.tune.space import load_space
from repro_py.tune.surrogate import GaussianProcess, Observation, Surrogate, accept_features, max_depth, step_features
from tests.sweep.conftest import make_target
from tests.tune.conftest import MEDIUM_SPACE
from tests.tune.fakes import ModelMeasure, true_tps


def test_features_encode_what_each_part_depends_on() -> None:
    tree = validate({"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048})
    wider = validate({"algorithm": "ddtree", "budget": 8, "topk": 8, "window": 2048})
    full = validate({"algorithm": "ddtree", "budget": 8, "topk": 4, "window": None})
    chain = validate({"algorithm": "dflash", "block_size": 8, "window": 2048})
    # the step time does not depend on top-K; acceptance does
    assert step_features(tree, 60) == step_features(wider, 60)
    assert accept_features(tree, 60) != accept_features(wider, 60)
    # a window that covers the context and a full cache are the same below the trained window, not above it
    assert accept_features(tree, 60) == accept_features(full, 60)
    assert accept_features(tree, 4096) != accept_features(full, 4096)
    # a DFlash chain is a top-K 1 tree of budget block - 1
    assert accept_features(chain, 60)[:2] == [math.log2(7), 0.0] and accept_features(chain, 60)[-1] == 1.0
    assert max_depth(tree) == 7 and max_depth(validate({"algorithm": "ddtree", "budget": 3, "topk": 1})) == 3


def test_gaussian_process_interpolates_and_is_unsure_far_away() -> None:
    x = np.array([[0.0], [1.0], [2.0], [3.0]])
    y = np.array([0.0, 1.0, 0.5, 0.2])
    gp = GaussianProcess().fit(x, y, np.full(4, 1e-4))
    mean, sd = gp.predict(np.array([[1.0], [10.0]]))
    assert mean[0] == pytest.approx(1.0, abs=0.05)
    assert sd[0] < 0.05 < sd[1]


def test_gaussian_process_does_not_carry_a_slope_past_the_measured_points() -> None:
    # log tok/s rising with log2 budget over budgets 2..8: far beyond them (budget 64) the prediction falls back
    # towards the observations' mean, not along a trend line drawn through four points (which put deep trees at
    # twice what they measured), and says it is unsure there
    x = np.array([[1.0], [2.0], [2.5], [3.0]])
    y = np.array([4.0, 4.3, 4.45, 4.6])
    gp = GaussianProcess().fit(x, y, np.full(4, 1e-3))
    mean, sd = gp.predict(np.array([[3.0], [6.0]]))
    assert mean[0] == pytest.approx(4.6, abs=0.05)
    assert mean[1] <= y.max()
    assert sd[1] > 5 * sd[0]


def _observations(n: int, seed: int) -> tuple[list[Observation], list]:
    space = load_space(make_target(hostvars={"tune_space": MEDIUM_SPACE}))
    configs = [c for c in space.configs if c.spec.algorithm != "none"]
    rng = np.random.default_rng(seed)
    measure = ModelMeasure(seed)
    obs = []
    for index in rng.choice(len(configs), n, replace=False):
        cell = measure.cell(configs[index], 60, 1, 3, 64)
        values = [r["output_tps"] for r in cell["repeats"]]
        obs.append(
            Observation(
                configs[index].spec,
                sum(values) / 3,
                cell["median"]["accept_length"],
                step_ms(cell),
                0.04,
            )
        )
    return obs, configs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_surrogate_orders_the_space_from_a_fifth_of_it_and_learns_from_its_misses(seed: int) -> None:
    obs, configs = _observations(25, seed)
    surrogate = Surrogate(60, 1).fit(obs)
    assert surrogate.mode == "acceptance/step"
    mean, _ = surrogate.predict([c.spec for c in configs])
    truth = np.array([true_tps(c, 60, 1) for c in configs])
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    assert np.corrcoef(rank(mean), rank(truth))[0, 1] > 0.7
    # its favourite, once screened, is predicted close to what it really does
    top = configs[int(np.argmax(mean))]
    cell = ModelMeasure(seed + 100).cell(top, 60, 1, 3, 64)
    values = [r["output_tps"] for r in cell["repeats"]]
    obs.append(Observation(top.spec, sum(values) / 3, cell["median"]["accept_length"], step_ms(cell), 0.04))
    again, _ = Surrogate(60, 1).fit(obs).predict([top.spec])
    assert math.exp(again[0]) == pytest.approx(true_tps(top, 60, 1), rel=0.1)


def test_without_counters_the_surrogate_models_tps_directly() -> None:
    obs, configs = _observations(12, 0)
    blind = [Observation(o.spec, o.tps, None, None, o.rel_se) for o in obs]
    surrogate = Surrogate(60, 1).fit(blind)
    assert surrogate.mode == "direct"
    mean, _ = surrogate.predict([c.spec for c in configs[:3]])
    assert mean.shape == (3,)
    assert Surrogate(60, 1).fit(blind[:1]).mode == "unfitted"


@pytest.mark.parametrize("direct", [False, True])
def test_a_config_in_flight_is_believed_at_its_prediction_so_the_uncertainty_around_it_shrinks(direct: bool) -> None:
    """The kriging believer (several hosts proposing at once): the mean stays, the spread near the believed config
    drops, the spread far from it barely moves."""
    obs, configs = _observations(8, 3)
    if direct:
        obs = [Observation(o.spec, o.tps, None, None, o.rel_se) for o in obs]
    surrogate = Surrogate(60, 1).fit(obs)
    assert surrogate.mode == ("direct" if direct else "acceptance/step")
    seen = {o.spec for o in obs}
    pool = [c.spec for c in configs if c.spec not in seen]
    mean, sd = surrogate.predict(pool)
    flying = pool[int(np.argmax(mean + 2.0 * sd))]  # what a host just took: the upper bound's argmax
    believing = surrogate.believing([flying])
    mean2, sd2 = believing.predict(pool)
    at = pool.index(flying)
    assert mean2[at] == pytest.approx(mean[at], abs=0.02)
    assert sd2[at] < 0.3 * sd[at]
    assert np.all(sd2 <= sd + 1e-9)  # believing never adds uncertainty
    far = int(np.argmax([np.linalg.norm(np.subtract(surrogate._x([p], "direct"), surrogate._x([flying], "direct")))
                         for p in pool]))  # fmt: skip
    assert sd2[far] > 0.8 * sd[far]
    # the next upper bound's argmax is another config
    assert pool[int(np.argmax(mean2 + 2.0 * sd2))] != flying
    assert surrogate.believing([]) is surrogate
