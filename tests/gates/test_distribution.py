"""The sampled gate's test: its false-alarm rate on equal distributions, its power on a shift, its arguments."""

from __future__ import annotations

import random

import pytest

from repro_py.gates.distribution import same_distribution

VOCAB = 30


def _draws(rng: random.Random, weights: list[float], n: int, tokens: int = 3) -> list[list[int]]:
    """``n`` sequences of ``tokens`` independent draws from ``weights``."""
    return [rng.choices(range(len(weights)), weights=weights, k=tokens) for _ in range(n)]


def _zipf(shift: float = 0.0) -> list[float]:
    weights = [1.0 / (1 + r) for r in range(VOCAB)]
    weights[0] *= 1.0 + shift
    return weights


def test_the_false_alarm_rate_on_equal_distributions_is_at_most_alpha() -> None:
    """Two samples of one distribution, 300 times: the share with p <= alpha stays within what alpha allows (the
    binomial 99.9% bound above alpha), at two alphas; and the p-values spread over (0, 1] (no pile-up at 1)."""
    rng = random.Random(2024)
    trials = 300
    p_values = []
    for trial in range(trials):
        base = {f"p{i}": _draws(rng, _zipf(), 40) for i in range(3)}
        test = {f"p{i}": _draws(rng, _zipf(), 40) for i in range(3)}
        p_values.append(same_distribution(base, test, tokens=3, alpha=0.1, permutations=99, seed=trial).p_value)
    for alpha, bound in ((0.1, 0.16), (0.05, 0.095)):
        rate = sum(p <= alpha for p in p_values) / trials
        assert rate <= bound, (alpha, rate)
    assert sum(p > 0.5 for p in p_values) / trials > 0.35


def test_a_shift_of_the_most_likely_token_is_found() -> None:
    """The most likely token at 40% instead of 25%, 150 samples of 4 prompts a side."""
    rng = random.Random(5)
    base = {f"p{i}": _draws(rng, _zipf(), 150) for i in range(4)}
    shifted = {f"p{i}": _draws(rng, _zipf(shift=1.0), 150) for i in range(4)}
    outcome = same_distribution(base, shifted, tokens=3, alpha=0.001, permutations=1999)
    assert outcome.differs and outcome.p_value == pytest.approx(1 / 2000)
    assert outcome.worst is not None and outcome.worst.prefix is not None and 0 in outcome.worst.prefix
    assert outcome.worst.tested_count > outcome.worst.baseline_count
    same = same_distribution(base, base, tokens=3, alpha=0.001, permutations=1999)
    assert not same.differs and same.p_value > 0.5


def test_only_prompts_both_sides_have_count_and_bad_arguments_are_refused() -> None:
    rng = random.Random(1)
    base = {"a": _draws(rng, _zipf(), 50), "b": _draws(rng, _zipf(), 50)}
    outcome = same_distribution(base, {"a": _draws(rng, _zipf(), 50), "c": [[1, 2, 3]]}, tokens=3, alpha=0.01,
                                permutations=99)  # fmt: skip
    assert outcome.worst is None or outcome.worst.prompt == "a"
    with pytest.raises(ValueError, match=r"permutations=0 must be >= 1 and alpha=0\.001"):
        same_distribution(base, base, tokens=3, alpha=0.001, permutations=0)
    with pytest.raises(ValueError, match=r"alpha=1\.5"):
        same_distribution(base, base, tokens=3, alpha=1.5, permutations=9)
