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
