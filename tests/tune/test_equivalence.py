"""Configs are run once only when they are the same for the run: a draft window covering every token it measures."""

from __future__ import annotations

from pathlib import Path

from repro_py.tune import proposals
from repro_py.tune.ladder import make_ladder
from repro_py.tune.proposals import unmeasured
from repro_py.tune.records import Proposal
from tests.tune.conftest import make_loop

SPACE = {
    "configs": [{"algorithm": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [5], "topk": [1], "block_size": [8], "window": [64, 1024, "none"]},
}


def _keys(tmp_path: Path, full_tokens: int, objectives: tuple[str, ...] = ("single-stream",)) -> dict[str, object]:
    search = make_loop(tmp_path, SPACE, objectives, ladder=make_ladder(full_tokens=full_tokens)).search
    return {c.label: proposals.equivalence_key(search, c) for c in search.space.configs}


def test_a_window_shorter_than_prompt_plus_output_is_not_a_full_draft_cache(tmp_path: Path) -> None:
    # a 60-token prompt (+4 tolerance) and 512 output tokens: sequences reach 576 tokens
    keys = _keys(tmp_path, 512)
    assert keys["ddtree-b5-t1-w64-bs8"] != keys["ddtree-b5-t1-wnone-bs8"]
    assert keys["ddtree-b5-t1-w1024-bs8"] == keys["ddtree-b5-t1-wnone-bs8"]
    # 2048 output tokens: the 1024 window no longer covers the run
    keys = _keys(tmp_path, 2048)
    assert keys["ddtree-b5-t1-w1024-bs8"] != keys["ddtree-b5-t1-wnone-bs8"]
    # the long-context cell (4096 tokens of prompt) is measured too: no window here covers it
    keys = _keys(tmp_path, 512, ("single-stream", "long-context"))
    assert len({keys[k] for k in keys if k.startswith("ddtree-b5")}) == 3


def test_measuring_the_full_cache_does_not_skip_a_short_window(tmp_path: Path) -> None:
    search = make_loop(tmp_path, SPACE, ladder=make_ladder()).search
    search.start(Proposal(search.space.by_label()["ddtree-b5-t1-wnone-bs8"], "test"))
    left = {c.label for c in unmeasured(search)}
    assert "ddtree-b5-t1-w64-bs8" in left and "ddtree-b5-t1-w1024-bs8" not in left
