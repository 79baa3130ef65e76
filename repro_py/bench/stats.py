"""Percentiles, median and coefficient of variation for benchmark figures.

Percentiles interpolate linearly between order statistics (the same rule as
``numpy.percentile``'s default), so p50 of an even-sized sample is the mean of
the two middle values. The coefficient of variation uses the sample standard
deviation (n - 1) over the mean; it is undefined (``None``) for fewer than two
values or a zero mean.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) of ``values``; ``None`` when empty."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    frac = rank - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * frac)


def percentiles(values: Sequence[float], qs: Iterable[int] = PERCENTILES) -> dict[str, float | None]:
    """``{"p50": .., "p90": .., "p99": ..}`` (``None`` values when empty)."""
    return {f"p{q}": percentile(values, q) for q in qs}


def median(values: Sequence[float]) -> float | None:
    return percentile(values, 50.0)


def mean(values: Sequence[float]) -> float | None:
    if not values:
        return None
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n - 1); ``None`` for fewer than two values."""
    if len(values) < 2:
        return None
    avg = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - avg) ** 2 for v in values) / (len(values) - 1))


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation, stdev / mean; ``None`` if undefined."""
    sd = stdev(values)
    avg = mean(values)
    if sd is None or avg is None or avg == 0:
        return None
    return sd / abs(avg)


def median_of_dicts(items: Sequence[dict[str, float | None]]) -> dict[str, float | None]:
    """Key-wise median of dicts of figures, skipping ``None`` entries."""
    keys: list[str] = []
    for item in items:
        for key in item:
            if key not in keys:
                keys.append(key)
    out: dict[str, float | None] = {}
    for key in keys:
        vals = [v for v in (item.get(key) for item in items) if v is not None]
        out[key] = median(vals)
    return out
