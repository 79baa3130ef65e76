from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from repro_py.bench import stats


def test_percentiles_interpolate_like_numpy_default() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert stats.percentile(values, 50) == 2.5
    assert stats.percentile(values, 0) == 1.0
    assert stats.percentile(values, 100) == 4.0
    assert stats.percentile(values, 90) == pytest.approx(3.7)
    assert stats.percentile([10.0, 0.0, 5.0], 50) == 5.0  # unsorted input


def test_percentiles_of_empty_and_single() -> None:
    assert stats.percentiles([]) == {"p50": None, "p90": None, "p99": None}
    assert stats.percentiles([7.0]) == {"p50": 7.0, "p90": 7.0, "p99": 7.0}
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_cv_uses_sample_stdev() -> None:
    values = [90.0, 100.0, 110.0]
    assert stats.stdev(values) == pytest.approx(10.0)
    assert stats.cv(values) == pytest.approx(0.1)
    assert stats.cv([5.0]) is None
    assert stats.cv([0.0, 0.0]) is None


def test_median_of_dicts_skips_none() -> None:
    got = stats.median_of_dicts([{"p50": 1.0, "p99": None}, {"p50": 3.0, "p99": 9.0}, {"p50": 2.0, "p99": 5.0}])
    assert got == {"p50": 2.0, "p99": 7.0}


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=50),
       st.floats(min_value=0, max_value=100))
def test_percentile_is_within_range_and_monotone(values: list[float], q: float) -> None:
    p = stats.percentile(values, q)
    assert p is not None
    assert min(values) - 1e-6 <= p <= max(values) + 1e-6
    p_hi = stats.percentile(values, min(100.0, q + 10))
    assert p_hi is not None and p_hi >= p - 1e-6 * max(1.0, abs(p))
    assert not math.isnan(p)
