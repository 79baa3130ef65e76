from __future__ import annotations

from typing import Any

from repro_py.bench.server_info import ServerInfo
from repro_py.gates.echo import check_echo, echo_result
from repro_py.spec_config import validate


def info(**kw: Any) -> ServerInfo:
    raw: dict[str, Any] = {
        "speculative_algorithm": "DFLASH", "speculative_ddtree_budget": 8, "speculative_ddtree_topk_cap": 4,
        "speculative_dflash_block_size": 8, "speculative_draft_window_size": 2048,
    }
    raw.update(kw)
    return ServerInfo(raw=raw, path="/server_info")


def test_ddtree_matches() -> None:
    assert check_echo(info(), validate({"budget": 8, "topk": 4, "window": 2048})) == []


def test_each_field_is_named() -> None:
    expected = validate({"budget": 16, "topk": 8, "window": "none", "block_size": 16})
    fields = {m.field: (m.expected, m.got) for m in check_echo(info(), expected)}
    assert fields == {
        "speculative_ddtree_budget": (16, 8),
        "speculative_ddtree_topk_cap": (8, 4),
        "speculative_dflash_block_size": (16, 8),
        "speculative_draft_window_size": (None, 2048),
    }


def test_tree_mode_is_decided_by_the_budget() -> None:
    chain = info(speculative_ddtree_budget=None, speculative_ddtree_topk_cap=None)
    assert [m.field for m in check_echo(chain, validate({"budget": 8, "topk": 4, "window": 2048}))] == [
        "speculative_ddtree_budget", "speculative_ddtree_topk_cap"]
    assert check_echo(chain, validate({"algorithm": "dflash", "window": 2048})) == []
    assert [m.field for m in check_echo(info(), validate({"algorithm": "dflash", "window": 2048}))] == [
        "speculative_ddtree_budget", "speculative_ddtree_topk_cap"]


def test_baseline_must_have_no_speculative_algorithm() -> None:
    none_cfg = validate({"algorithm": "none"})
    assert check_echo(info(speculative_algorithm=None), none_cfg) == []
    assert [m.field for m in check_echo(info(), none_cfg)] == ["speculative_algorithm"]
    assert [m.field for m in check_echo(info(speculative_algorithm="EAGLE"), validate({"budget": 8, "topk": 4,
                                                                                        "window": 2048}))] == [
        "speculative_algorithm"]


def test_result_shape() -> None:
    res = echo_result(info(), validate({"budget": 12, "topk": 4, "window": 2048}))
    assert res["passed"] is False
    assert res["mismatches"] == [{"field": "speculative_ddtree_budget", "expected": 12, "got": 8}]
    assert "expected 12" in res["reason"]


def test_the_reported_settings_and_the_bench_summary_follow_the_contract() -> None:
    """Every field of the contract, as the server reports it (decimal strings as ints, '' as unset), under its
    echo key in the gate's report and under the stored names in the bench result's engine section."""
    reported = info(speculative_ddtree_budget="12", speculative_algorithm="", speculative_num_draft_tokens=8)
    assert reported.settings() == {"algorithm": None, "budget": 12, "topk": 4, "window": 2048, "block_size": 8}
    assert echo_result(reported, validate({"budget": 12, "topk": 4, "window": 2048}))["reported"] == {
        "speculative_algorithm": None, "speculative_ddtree_budget": 12, "speculative_ddtree_topk_cap": 4,
        "speculative_dflash_block_size": 8, "speculative_draft_window_size": 2048, "speculative_num_draft_tokens": 8,
    }  # fmt: skip
    assert reported.engine_summary()["speculative"] == {
        "algorithm": None, "ddtree_budget": 12, "ddtree_topk_cap": 4, "block_size": 8, "window": 2048,
        "num_draft_tokens": 8,
    }  # fmt: skip
