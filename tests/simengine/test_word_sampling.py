"""The simulated model's sampled words: the target's processed distribution, the tree walk that draws them as a
speculative server verifies them (exactly the target's distribution, whatever the drafted children), and the
bonus-unadjusted fault (not the target's distribution: the drafted words come out too often)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from repro_py.simengine import faults, textgen
from repro_py.simengine.textgen import WORDS
from repro_py.simengine.word_sampling import Processing, walk_distribution

CONTEXT = "prompt:Describe a tree."


def _target(processing: Processing) -> dict[int, float]:
    return dict(processing.processed(WORDS, CONTEXT))


@pytest.mark.parametrize("children", [0, 1, 4, 8])
def test_the_walk_draws_exactly_the_targets_distribution(children: int) -> None:
    processing = Processing(1.0, top_p=0.9, children=children)
    exact = walk_distribution(processing, WORDS, CONTEXT)
    target = _target(processing)
    assert set(exact) == set(target) and all(exact[i] == pytest.approx(p, abs=1e-12) for i, p in target.items())
    rng = random.Random(7)
    n = 30_000
    counts = Counter(WORDS.index(processing.draw(rng, WORDS, CONTEXT)) for _ in range(n))
    assert set(counts) <= set(target)  # top_p: no word outside the nucleus
    assert max(abs(counts[i] / n - p) for i, p in target.items()) < 0.012


def test_the_bonus_unadjusted_fault_inflates_the_drafted_words() -> None:
    healthy = Processing(1.0, top_p=0.9, children=4)
    faulty = Processing(1.0, top_p=0.9, children=4, bonus_unadjusted=True)
    target = _target(healthy)
    drafted = list(target)[:4]
    covered = sum(target[i] for i in drafted)
    bad = walk_distribution(faulty, WORDS, CONTEXT)
    assert sum(bad.values()) == pytest.approx(1.0)
    for i, p in target.items():  # a drafted word: its own chance plus the bonus's; any other: the bonus's only
        expected = p * (2.0 - covered) if i in drafted else p * (1.0 - covered)
        assert bad[i] == pytest.approx(expected)
    assert bad[drafted[0]] > 1.3 * target[drafted[0]]
    rng = random.Random(11)
    n = 20_000
    counts = Counter(WORDS.index(faulty.draw(rng, WORDS, CONTEXT)) for _ in range(n))
    assert counts[drafted[0]] / n == pytest.approx(bad[drafted[0]], abs=0.015)


def test_temperature_top_k_top_p_and_min_p_shape_the_distribution() -> None:
    cold, hot = _target(Processing(0.5)), _target(Processing(1.5))
    assert max(cold.values()) > max(_target(Processing(1.0)).values()) > max(hot.values())
    assert len(_target(Processing(1.0, top_k=5))) == 5
    nucleus = _target(Processing(1.0, top_p=0.5))
    assert 1 < len(nucleus) < len(WORDS) and sum(nucleus.values()) == pytest.approx(1.0)
    full = list(Processing(1.0).processed(WORDS, CONTEXT))
    assert sum(p for _, p in full[: len(nucleus) - 1]) < 0.5 <= sum(p for _, p in full[: len(nucleus)])
    floor = _target(Processing(1.0, min_p=0.2))
    assert min(floor.values()) >= 0.2 * max(floor.values())


def test_greedy_text_never_reaches_the_sampler_and_sampled_text_follows_the_settings() -> None:
    greedy = textgen.raw_output("Describe a tree.", model="m", temperature=0.0, seed=None, limit=64)
    unfaulty = textgen.raw_output("Describe a tree.", model="m", temperature=0.0, seed=None, limit=64,
                                  sampling=Processing(1.0, children=4, bonus_unadjusted=True))  # fmt: skip
    assert greedy == unfaulty  # temperature 0: the greedy path, whatever the sampling settings say
    one = textgen.raw_output("Describe a tree.", model="m", temperature=0.7, seed=5, limit=64,
                             sampling=Processing(0.7, children=4))  # fmt: skip
    two = textgen.raw_output("Describe a tree.", model="m", temperature=0.7, seed=5, limit=64,
                             sampling=Processing(0.7, children=1))  # fmt: skip
    assert one.startswith(textgen.THINK_OPEN) and len(one) > 100
    assert one != two  # the same seed, another walk: another sample of the same distribution


def test_the_fault_parses_and_takes_no_argument() -> None:
    parsed = faults.parse_faults(["bonus-unadjusted"])
    assert parsed.bonus_unadjusted and parsed.specs == ("bonus-unadjusted",)
    with pytest.raises(faults.FaultError, match="bonus-unadjusted takes no argument"):
        faults.parse_faults(["bonus-unadjusted:3"])
    assert "bonus-unadjusted" in faults.ALLOWED
