"""The shared speculative-parameter rules (used by the engine, the sweep and the preflight)."""

from __future__ import annotations

import dataclasses

import pytest

from repro_py import spec_config
from repro_py.spec_config import SpecConfig, SpecConfigError, to_engine_flags, validate


def _problems(raw: dict[str, object], **kw: object) -> list[str]:
    with pytest.raises(SpecConfigError) as exc:
        validate(raw, **kw)  # type: ignore[arg-type]
    return exc.value.problems


def test_field_default_is_valid_and_labelled() -> None:
    cfg = validate({"budget": 8, "topk": 4, "window": 2048, "block_size": 8})
    assert cfg == SpecConfig("ddtree", 8, 4, 2048, 8)
    assert cfg.label == "ddtree-b8-t4-w2048-bs8"
    assert cfg.verify_width == 9


def test_extra_var_strings_are_accepted_as_integers() -> None:
    # `ansible-playbook -e budget=8` hands the value over as the string "8".
    cfg = validate({"budget": "12", "topk": "6", "window": "none", "block_size": "8"})
    assert (cfg.budget, cfg.topk, cfg.window, cfg.block_size) == (12, 6, None, 8)
    assert cfg.label == "ddtree-b12-t6-wnone-bs8"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"budget": 0, "topk": 1}, "budget=0 is out of range; allowed 1..256"),
        ({"budget": 257, "topk": 1}, "budget=257 is out of range; allowed 1..256"),
        ({"budget": 8, "topk": 9}, "topk=9 is out of range (topk must be <= budget=8)"),
        ({"budget": 8, "topk": 0}, "topk=0 is out of range"),
        ({"budget": True, "topk": 1}, "budget=True is a boolean"),
        ({"budget": "eight", "topk": 1}, "budget='eight' is not an integer"),
        ({"budget": 8, "topk": 4, "window": 0}, "window=0 is out of range"),
        ({"budget": 8, "topk": 4, "window": "abc"}, "window='abc' is not an integer"),
        ({"budget": 8, "topk": 4, "block_size": 12}, "block_size=12 is not allowed; allowed: 8, 16"),
        ({"budget": 8, "topk": 4, "window": 4, "block_size": 8}, "window=4 is smaller than block_size=8"),
        ({"budget": 8}, "topk is required for algorithm=ddtree"),
        ({"topk": 4}, "budget is required for algorithm=ddtree"),
        ({"algorithm": "eagle"}, "algorithm='eagle' is not allowed; allowed: ddtree, dflash, none"),
        ({"algorithm": "none", "budget": 8}, "algorithm=none (the autoregressive baseline) takes no speculative"),
        ({"algorithm": "dflash", "topk": 4}, "topk=4 is a DDTree setting but algorithm=dflash"),
        ({"budget": 8, "topk": 4, "bugdet": 9}, "unknown key(s) bugdet"),
    ],
)
def test_bad_values_are_named_with_the_allowed_range(raw: dict[str, object], needle: str) -> None:
    problems = _problems(raw)
    assert any(needle in p for p in problems), problems


def test_every_problem_is_reported_at_once() -> None:
    problems = _problems({"budget": 0, "topk": "x", "window": -1, "block_size": 3})
    assert len(problems) >= 3


def test_block_mismatch_with_drafter_needs_explicit_permission() -> None:
    raw = {"budget": 16, "topk": 4, "block_size": 16}
    (msg,) = _problems(raw, drafter_block_size=8)
    assert "block_size=16 differs from the drafter's trained block size 8" in msg
    assert "out of distribution" in msg
    assert validate(raw, drafter_block_size=8, allow_block_mismatch=True).block_size == 16


def test_engine_flags_for_each_algorithm() -> None:
    tree = validate({"budget": 8, "topk": 4, "window": 2048})
    assert to_engine_flags(tree, drafter_path="/m/d") == [
        "--speculative-algorithm", "DDTREE",
        "--speculative-draft-model-path", "/m/d",
        "--speculative-ddtree-budget", "8",
        "--speculative-ddtree-topk-cap", "4",
        "--speculative-draft-window-size", "2048",
        "--speculative-dflash-block-size", "8",
    ]  # fmt: skip
    chain = validate({"algorithm": "dflash", "block_size": 16})
    assert to_engine_flags(chain, drafter_path=None) == [
        "--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "16",
    ]  # fmt: skip
    assert chain.verify_width == 16
    base = validate({"algorithm": "none"})
    assert to_engine_flags(base, drafter_path="/m/d") == []
    assert base.label == "baseline" and base.verify_width == 1


def test_the_fields_of_each_algorithm_come_from_the_table() -> None:
    assert spec_config.keys_of("ddtree") == spec_config.SHORT_KEYS
    assert spec_config.keys_of("dflash") == ("algorithm", "window", "block_size")
    assert spec_config.keys_of("none") == ("algorithm",)
    assert spec_config.dropped_keys("ddtree") == ()
    assert spec_config.dropped_keys("dflash") == ("budget", "topk")
    assert spec_config.dropped_keys("none") == ("budget", "topk", "window", "block_size")
    assert spec_config.fields_of("dflash")[0] is spec_config.FIELD_BY_KEY["algorithm"]
    assert [f.key for f in spec_config.SETTINGS] == ["budget", "topk", "window", "block_size"]
    with pytest.raises(ValueError, match=r"algorithm='eagle' is not allowed; allowed: ddtree, dflash, none"):
        spec_config.fields_of("eagle")


def test_validate_drops_what_field_algorithms_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table, not validate, says which algorithm uses a field: a window made DDTree-only is refused for
    DFLASH with the same message as the DDTree settings, and leaves the DFLASH label and flags."""
    table = tuple(
        dataclasses.replace(f, algorithms=frozenset({"ddtree"})) if f.key == "window" else f
        for f in spec_config.FIELDS
    )
    monkeypatch.setattr(spec_config, "FIELDS", table)
    monkeypatch.setattr(spec_config, "FIELD_BY_KEY", {f.key: f for f in table})
    monkeypatch.setattr(spec_config, "SETTINGS", table[1:])
    assert _problems({"algorithm": "dflash", "window": 2048}) == [
        "window=2048 is a DDTree setting but algorithm=dflash; use algorithm=ddtree"
    ]
    chain = validate({"algorithm": "dflash", "block_size": 16})
    assert chain.label == "dflash-bs16" and chain.window is None
    assert to_engine_flags(chain, drafter_path=None) == [
        "--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "16",
    ]  # fmt: skip
    assert spec_config.expected_echo(chain)["speculative_draft_window_size"] is None


def test_the_drafters_block_size_is_read_as_sglang_reads_it() -> None:
    # sglang 0.5.23's parse_dflash_draft_config: dflash_config.block_size first, then a top-level block_size.
    both = {"block_size": 16, "dflash_config": {"block_size": 8}}
    assert spec_config.drafter_block_size(both) == 8
    assert spec_config.drafter_block_size({"block_size": 16, "dflash_config": {"mask_token_id": 1}}) == 16
    assert spec_config.drafter_block_size({"architectures": ["DFlashDraftModel"]}) is None
    for bad, where in (({"dflash_config": {"block_size": "8"}}, "dflash_config.block_size='8'"),
                       ({"block_size": True}, "block_size=True"), ({"block_size": 0}, "block_size=0")):
        with pytest.raises(SpecConfigError) as exc:
            spec_config.drafter_block_size(bad)
        assert f"{where} in the drafter's config.json must be an integer >= 1" in str(exc.value)


def test_block_mismatch_names_both_sizes_and_the_way_out() -> None:
    assert spec_config.block_mismatch(8, 8, False) is None
    assert spec_config.block_mismatch(16, None, False) is None
    assert spec_config.block_mismatch(16, 8, True) is None
    msg = spec_config.block_mismatch(16, 8, False)
    assert msg and "block_size=16 differs from the drafter's trained block size 8" in msg
    assert "allow_block_mismatch=true" in msg
