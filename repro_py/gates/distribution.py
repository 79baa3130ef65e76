"""Do two sets of sampled generations come from the same distribution? A stratified permutation test.

For each prompt, the first N tokens of many independent generations from each side (a baseline
server and the server under test). The test looks at every prefix length L = 1..N (each generation
falls in the category of its first L tokens: the joint distribution, sparse for long prefixes) and
at every position L = 2..N alone (the category of its L-th token: dense, where a shift at one
position shows even when prefixes are spread thin); categories seen fewer than ``min_count`` times
on both sides together are pooled into one. Each (prompt, table) of counts (2 rows, one per side)
gives Pearson's chi-square X^2 with df = categories - 1, standardised as ``(X^2 - df) / sqrt(2 df)``;
the statistic is their sum over every prompt and table.

Its null distribution is not assumed: the side labels of one prompt's generations are shuffled
(``permutations`` times, the same shuffle for every prefix length of that prompt, independently
per prompt) and the statistic recomputed. When both sides sample from the same distribution the
labels are exchangeable within a prompt, so the p-value ``(1 + #{permuted >= observed}) /
(permutations + 1)`` satisfies ``P(p <= alpha) <= alpha`` exactly for every ``alpha`` that is a
multiple of ``1 / (permutations + 1)``, whatever the vocabulary, the sample size or the number of
tables: the false-alarm rate of ``p <= alpha`` is at most ``alpha``. (Pooling rare categories and
the standardisation only shape the statistic, never the validity.)

The counts are sums over each category's generations (:func:`_counts`), never a matrix product: a
product this size goes to OpenBLAS's thread pool, and a fork in another thread of the same process
(ansible-runner starting a play for another host of a fleet, side by side with this test) shuts
that pool down under the running call, which then spins forever at 100% CPU while every other
caller waits on its lock.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

Sample = Sequence[int]


@dataclasses.dataclass(frozen=True)
class Table:
    """One (prompt, prefix length) table: the most over-represented category on the tested side."""

    prompt: str
    length: int
    position_only: bool  # the L-th token alone (else the first L tokens)
    z: float  # standardised chi-square of the observed table
    categories: int
    prefix: tuple[int, ...] | None  # the category whose share moved most (None: the pooled rest)
    tested_count: int
    baseline_count: int


@dataclasses.dataclass(frozen=True)
class Outcome:
    statistic: float
    p_value: float
    alpha: float
    permutations: int
    tables: int  # tables with at least two categories (the others carry no information)
    worst: Table | None

    @property
    def differs(self) -> bool:
        return self.p_value <= self.alpha


Categories = tuple[npt.NDArray[np.int64], list[tuple[int, ...] | None]]


def _categories(pooled: Sequence[Sample], length: int, min_count: int, position_only: bool) -> Categories:
    """Each generation's category code for its first ``length`` tokens (``position_only``: its ``length``-th token),
    and the categories' tokens (None: the pooled rare ones, last)."""
    keys = [tuple(s[length - 1 : length]) if position_only else tuple(s[:length]) for s in pooled]
    counts = Counter(keys)
    frequent = sorted(k for k, c in counts.items() if c >= min_count)
    index = {k: i for i, k in enumerate(frequent)}
    names: list[tuple[int, ...] | None] = list(frequent)
    other = len(frequent)
    codes = np.array([index.get(k, other) for k in keys], dtype=np.int64)
    if np.any(codes == other):
        names.append(None)
    return codes, names


def _tables(tokens: int) -> list[tuple[int, bool]]:
    """(length, position_only) of every table: each prefix length, then each position after the first."""
    return [(n, False) for n in range(1, tokens + 1)] + [(n, True) for n in range(2, tokens + 1)]


def _counts(rows: npt.NDArray[np.float64], codes: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.float64]:
    """``rows @ onehot(codes, k)`` without BLAS: each row's sum over each category's columns (exact: 0/1 sums)."""
    if rows.ndim == 1:
        return np.bincount(codes, weights=rows, minlength=k).astype(np.float64)
    return np.stack([rows[:, codes == c].sum(axis=1) for c in range(k)], axis=1)


def _z(observed: npt.NDArray[np.float64], expected: npt.NDArray[np.float64], weight: npt.NDArray[np.float64],
       df: int) -> npt.NDArray[np.float64]:
    """Standardised chi-square of 2 x K tables given the tested side's counts (rows of ``observed``)."""
    chi2 = ((observed - expected) ** 2 * weight).sum(axis=-1)
    result: npt.NDArray[np.float64] = (chi2 - df) / math.sqrt(2.0 * df)
    return result


def same_distribution(
    baseline: Mapping[str, Sequence[Sample]],
    tested: Mapping[str, Sequence[Sample]],
    *,
    tokens: int,
    alpha: float,
    permutations: int,
    min_count: int = 5,
    seed: int = 0,
) -> Outcome:
    """The permutation test over the prompts both sides have (see the module doc)."""
    if permutations < 1 or not 0.0 < alpha < 1.0:
        raise ValueError(f"permutations={permutations} must be >= 1 and alpha={alpha} in (0, 1)")
    rng = np.random.default_rng(seed)
    observed_total = 0.0
    permuted_total = np.zeros(permutations)
    tables = 0
    worst: Table | None = None
    for prompt in sorted(set(baseline) & set(tested)):
        base, test = list(baseline[prompt]), list(tested[prompt])
        pooled = base + test
        n_a, n_b, n = len(base), len(test), len(base) + len(test)
        if n_a == 0 or n_b == 0:
            continue
        labels = np.r_[np.zeros(n_a), np.ones(n_b)]
        shuffled = rng.permuted(np.tile(labels, (permutations, 1)), axis=1)
        for length, position_only in _tables(tokens):
            codes, names = _categories(pooled, length, min_count, position_only)
            k = len(names)
            if k < 2:
                continue
            col = np.bincount(codes, minlength=k).astype(np.float64)
            expected = col * n_b / n
            weight = n * n / (col * n_a * n_b)
            obs_b = _counts(labels, codes, k)
            z_obs = float(_z(obs_b, expected, weight, k - 1))
            observed_total += z_obs
            permuted_total += _z(_counts(shuffled, codes, k), expected, weight, k - 1)
            tables += 1
            if worst is None or z_obs > worst.z:
                moved = int(np.argmax(obs_b / n_b - (col - obs_b) / n_a))
                worst = Table(prompt, length, position_only, z_obs, k, names[moved], int(obs_b[moved]),
                              int(col[moved] - obs_b[moved]))
    exceed = int(np.sum(permuted_total >= observed_total)) if tables else permutations
    return Outcome(
        statistic=observed_total,
        p_value=(1 + exceed) / (permutations + 1),
        alpha=alpha,
        permutations=permutations,
        tables=tables,
        worst=worst,
    )
