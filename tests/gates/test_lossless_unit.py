from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from repro_py.gates.lossless import PROMPTS, compare, make_reference


def test_identical() -> None:
    c = compare([1, 2, 3], [1, 2, 3])
    assert c.exact and c.first_divergence is None


def test_first_divergence_index() -> None:
    c = compare([1, 2, 3, 4], [1, 2, 9, 4])
    assert not c.exact and c.first_divergence == 2


def test_length_difference_diverges_at_the_shorter_length() -> None:
    assert compare([1, 2, 3], [1, 2]).first_divergence == 2
    assert compare([1, 2], [1, 2, 3]).first_divergence == 2
    assert compare([], [5]).first_divergence == 0


@given(st.lists(st.integers(0, 5), max_size=30), st.lists(st.integers(0, 5), max_size=30))
def test_compare_properties(a: list[int], b: list[int]) -> None:
    c = compare(a, b)
    assert c.exact == (a == b)
    if not c.exact:
        assert c.first_divergence is not None
        i = c.first_divergence
        assert a[:i] == b[:i]
        assert i == min(len(a), len(b)) or a[i] != b[i]


def test_reference_shape() -> None:
    ref = make_reference({"capital": [1, 2]}, max_new_tokens=16, source="baseline", deterministic=True)
    assert ref["prompts"] == {"capital": dict(PROMPTS)["capital"]}
    assert ref["outputs"] == {"capital": [1, 2]} and ref["max_new_tokens"] == 16 and ref["schema"] == 2
    assert ref["algorithm"] == "none" and ref["deterministic"] is True and ref["ignore_eos"] is True
