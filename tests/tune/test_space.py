"""The search space: built-in default, product capping, validation before anything restarts, neighbours."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro_py.sweep.errors import PlanError
from repro_py.tune.space import load_space
from tests.sweep.conftest import make_target


def test_builtin_space_is_the_ddtree_space_with_dflash_and_the_baseline() -> None:
    space = load_space(make_target())
    labels = {c.label for c in space.configs}
    assert len(space) == 633
    assert space.capped == 16 * 6 * 2 * 4 - 624  # products over budget x topk with topk > budget
    assert {"baseline", "dflash-wnone-bs16", "ddtree-b64-t8-w4096-bs16", "ddtree-b1-t1-w1024-bs8"} <= labels
    assert all(c.spec.topk is None or c.spec.topk <= (c.spec.budget or 0) for c in space.configs)
    assert space.source == "built-in default space"


def test_space_file_wins_over_the_inventory_and_caps_topk(tmp_path: Path) -> None:
    path = tmp_path / "space.yml"
    path.write_text("grid: {algorithm: [ddtree], budget: [2, 4], topk: [1, 4], window: [2048]}\n", encoding="utf-8")
    target = make_target(hostvars={"tune_space": {"configs": [{"algorithm": "none"}]}})
    space = load_space(target, path)
    labels = [c.label for c in space.configs]
    assert labels == ["ddtree-b2-t1-w2048-bs8", "ddtree-b4-t1-w2048-bs8", "ddtree-b4-t4-w2048-bs8"]
    assert space.capped == 1
    assert [c.label for c in load_space(target).configs] == ["baseline"]


def test_an_invalid_config_refuses_the_space_naming_it() -> None:
    target = make_target(
        hostvars={"tune_space": {"grid": {"algorithm": ["ddtree"], "budget": [8], "topk": [4], "block_size": [8, 12]}}}
    )
    with pytest.raises(PlanError) as err:
        load_space(target)
    assert "block_size=12 is not allowed; allowed: 8, 16" in str(err.value)


def test_fault_injection_only_for_a_simulated_engine() -> None:
    doc = {"configs": [{"algorithm": "ddtree", "budget": 8, "topk": 4, "sim_fault": "mask-offset"}]}
    assert load_space(make_target(hostvars={"tune_space": doc})).configs[0].sim_fault == "mask-offset"
    with pytest.raises(PlanError, match="only allowed for a simulated-engine inventory"):
        load_space(make_target(simulated=False, hostvars={"tune_space": doc}))


def test_bad_documents_are_refused(tmp_path: Path) -> None:
    for doc, message in (
        ({"grids": []}, "unknown top-level key"),
        ([{"algorithm": "none"}], "expected a mapping"),
        ({"grid": {"algorithm": ["ddtree"], "budget": [2], "topk": [4]}}, "the space is empty"),
    ):
        with pytest.raises(PlanError, match=message):
            load_space(make_target(hostvars={"tune_space": doc}))
    with pytest.raises(PlanError, match="--space"):
        load_space(make_target(), tmp_path / "missing.yml")


def test_neighbours_are_one_step_in_one_setting() -> None:
    space = load_space(make_target())
    cfg = space.by_label()["ddtree-b8-t4-w2048-bs8"]
    near = {c.label for c in space.neighbours(cfg)}
    assert near == {
        "ddtree-b7-t4-w2048-bs8",
        "ddtree-b10-t4-w2048-bs8",  # budget
        "ddtree-b8-t3-w2048-bs8",
        "ddtree-b8-t6-w2048-bs8",  # topk
        "ddtree-b8-t4-w2048-bs16",  # block
        "ddtree-b8-t4-w1024-bs8",
        "ddtree-b8-t4-w4096-bs8",  # window
    }
    edge = space.by_label()["ddtree-b1-t1-wnone-bs8"]
    assert {c.label for c in space.neighbours(edge)} == {
        "ddtree-b2-t1-wnone-bs8",
        "ddtree-b1-t1-wnone-bs16",
        "ddtree-b1-t1-w4096-bs8",
    }
