"""Pooled noise, confidence intervals, the fidelity ladder and the racing rule."""

from __future__ import annotations

import math

import pytest

from repro_py.tune.ladder import LadderError, Rung, make_ladder, race
from repro_py.tune.noise import Estimate, NoiseModel, prob_greater, z_for


def test_pooled_noise_starts_at_the_prior_and_learns_from_every_config() -> None:
    noise = NoiseModel(prior_cv=0.05, prior_dof=4, floor_cv=0.0, confidence=0.9)
    assert noise.rel_sd("screen", "single-stream") == pytest.approx(0.05)
    for index in range(20):  # 20 configs, each with a 1% spread
        noise.observe("screen", "single-stream", f"c{index}", [99.0, 100.0, 101.0])
    assert noise.rel_sd("screen", "single-stream") == pytest.approx(math.sqrt((4 * 0.0025 + 40 * 1e-4) / 44), rel=1e-3)
    assert noise.rel_sd("full", "single-stream") == pytest.approx(0.05)  # another rung: its own pool
    est = noise.estimate("screen", "single-stream", [99.0, 100.0, 101.0])
    assert est is not None and est.mean == pytest.approx(100.0) and est.n == 3
    assert est.high - est.low == pytest.approx(2 * z_for(0.9) * est.se)
    noise.forget("c0")
    assert noise.estimate("screen", "single-stream", []) is None


def test_the_between_restart_floor_widens_every_interval() -> None:
    tight = NoiseModel(prior_cv=0.001, prior_dof=100, floor_cv=0.0).estimate("r", "m", [100.0, 100.0])
    floored = NoiseModel(prior_cv=0.001, prior_dof=100, floor_cv=0.02).estimate("r", "m", [100.0, 100.0])
    assert tight is not None and floored is not None
    assert floored.se == pytest.approx(100.0 * math.sqrt(0.001**2 / 2 + 0.02**2))
    assert floored.se > 10 * tight.se


def test_the_between_restart_noise_is_measured_from_the_references_restarts() -> None:
    noise = NoiseModel(prior_cv=0.001, prior_dof=100, floor_cv=0.01, floor_prior_dof=1.0)
    assert noise.between().measured is None and noise.between().cv == pytest.approx(0.01)
    noise.observe_restart("full", "m", 1, [100.0, 100.0, 100.0])
    assert noise.between().measured is None  # one restart says nothing about restarts
    noise.observe_restart("full", "m", 2, [110.0, 110.0, 110.0])
    between = noise.between()
    measured = math.log(1.1) ** 2 / 2 - noise.rel_variance("full", "m") / 3
    assert between.measured == pytest.approx(measured) and between.dof == 1
    assert between.variance == pytest.approx((0.01**2 + measured) / 2)  # the prior is worth one restart
    assert "measured 6.7% from 2 restarts of the reference" in between.text()
    est = noise.estimate("full", "m", [100.0, 100.0, 100.0])
    assert est is not None
    assert est.se == pytest.approx(100 * math.sqrt(noise.rel_variance("full", "m") / 3 + between.variance))
    # the same config in two restarts: the mean of the restarts' means, the error of that mean
    other = noise.estimate("full", "m", [110.0, 110.0, 110.0])
    assert other is not None
    both = noise.combined([est, other])
    assert both is not None and both.mean == pytest.approx(105.0)
    assert both.se == pytest.approx(math.hypot(est.se, other.se) / 2)
    noise.forget_restart(2)
    assert noise.between().measured is None


def test_the_projections_spread_against_the_full_rung_is_measured() -> None:
    noise = NoiseModel(prior_cv=0.001, prior_dof=100, projection_cv=0.05, projection_prior_dof=2.0)
    assert noise.projection("screen", "m") == (0.0, pytest.approx(0.0025), 0)
    for label, ratio in (("a", 1.0), ("b", 1.1), ("c", 0.9)):
        noise.observe_projection("screen", "m", label, [100.0] * 3, full_rung="full", full=[100.0 * ratio] * 3)
    bias, variance, configs = noise.projection("screen", "m")
    residuals = [0.0, math.log(1.1), math.log(0.9)]
    spread = sum((r - sum(residuals) / 3) ** 2 for r in residuals) / 2 - 2 * noise.rel_variance("screen", "m") / 3
    assert configs == 3 and bias == pytest.approx(sum(residuals) / 3)
    assert variance == pytest.approx((2 * 0.0025 + 2 * spread) / 4)
    plain = noise.estimate("screen", "m", [100.0] * 3)
    projected = noise.estimate("screen", "m", [100.0] * 3, projected=True)
    assert plain is not None and projected is not None and projected.se > plain.se


def test_prob_greater() -> None:
    a, b = Estimate(110.0, 3.0, 3, 1.64), Estimate(100.0, 4.0, 3, 1.64)
    assert prob_greater(a, b) == pytest.approx(0.977, abs=0.001)
    assert prob_greater(b, a) == pytest.approx(1 - 0.977, abs=0.001)
    assert prob_greater(Estimate(1, 0, 1, 1), Estimate(1, 0, 1, 1)) == 0.5


def test_ladder() -> None:
    assert make_ladder() == (Rung("screen", 64, 3), Rung("confirm", 181, 3), Rung("full", 512, 3))
    assert make_ladder(full_tokens=64, screen_tokens=32, full_repeats=2) == (Rung("screen", 32, 3), Rung("full", 64, 2))
    assert make_ladder(full_tokens=64, screen_tokens=64, full_repeats=3, screen_repeats=3) == (Rung("full", 64, 3),)
    with pytest.raises(LadderError, match="--screen-tokens 600 must not exceed --max-tokens 512"):
        make_ladder(screen_tokens=600)
    with pytest.raises(LadderError, match="--repeats=0 must be >= 1"):
        make_ladder(full_repeats=0)


def test_race_drops_only_when_the_interval_is_clearly_behind() -> None:
    leader = ("a", Estimate(100.0, 2.0, 3, 2.0))  # 96..104
    assert race(Estimate(95.0, 2.0, 3, 2.0), [leader]).keep  # 91..99 overlaps: noise could explain it
    verdict = race(Estimate(90.0, 2.0, 3, 2.0), [leader])  # 86..94 entirely below 96
    assert not verdict.keep and "clearly behind a" in verdict.reason
    assert race(Estimate(50.0, 1.0, 3, 2.0), []).keep
    # the best lower bound decides, not the best mean
    noisy = ("noisy", Estimate(105.0, 20.0, 1, 2.0))
    assert race(Estimate(90.0, 2.0, 3, 2.0), [noisy, leader]).reason.startswith("clearly behind a")
