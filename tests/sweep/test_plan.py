from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from repro_py.results.lossless_mode import SHARED
from repro_py.results.schema import new_result
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.estimate import estimate, estimate_basis, format_duration
from repro_py.sweep.grid import expand_grid, grid_from_target, load_grid_file, validate_config
from repro_py.sweep.inventory import load_target
from repro_py.sweep.lossless_restart import LosslessRestart
from tests.sweep.conftest import make_plan, make_target


def test_grid_is_a_cartesian_product() -> None:
    raws = expand_grid(
        {"grid": {"algorithm": ["ddtree"], "budget": [4, 8, 16], "topk": [4], "window": [2048, "none"]}},
        where="t",
    )
    assert len(raws) == 6
    assert {(r["budget"], r["window"]) for r in raws} == {(b, w) for b in (4, 8, 16) for w in (2048, "none")}


def test_explicit_list_and_grid_combine(tmp_path: Path) -> None:
    path = tmp_path / "grid.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "configs": [{"algorithm": "none"}, {"algorithm": "dflash", "block_size": 8, "window": 2048}],
                "grid": {"budget": [8, 12], "topk": [4, 6]},
            }
        ),
        encoding="utf-8",
    )
    raws = load_grid_file(path)
    assert len(raws) == 2 + 4
    plan = make_plan(raws, tmp_path=tmp_path)
    labels = [c.label for c in plan.configs]
    assert labels[0] == "baseline"  # the lossless reference runs first
    assert "dflash-w2048-bs8" in labels
    assert "ddtree-b12-t6-wnone-bs8" in labels
    assert len(labels) == 6


def test_plain_list_grid_from_inventory_var() -> None:
    target = make_target(hostvars={"sweep_grid": [{"budget": 8, "topk": 4}, {"budget": 4, "topk": 4}]})
    assert grid_from_target(target) == [{"budget": 8, "topk": 4}, {"budget": 4, "topk": 4}]


def test_missing_grid_var_is_refused() -> None:
    with pytest.raises(PlanError, match="no sweep_grid"):
        grid_from_target(make_target())


def test_every_invalid_config_is_listed_with_its_message(tmp_path: Path) -> None:
    raws: list[dict[str, object]] = [
        {"algorithm": "ddtree", "budget": 8, "topk": 4},
        {"algorithm": "ddtree", "budget": 8, "topk": 12},
        {"algorithm": "ddtree", "budget": 999, "topk": 4},
        {"algorithm": "none", "budget": 8},
        {"algorithm": "ddtree", "budget": 8, "topk": 4, "block_size": 12},
        {"algorithm": "eagle"},
        {"algorithm": "ddtree", "budget": 8, "topk": 4, "colour": "red"},
    ]
    with pytest.raises(PlanError) as info:
        make_plan(raws, tmp_path=tmp_path)
    problems = info.value.problems
    assert len(problems) == 6
    text = "\n".join(problems)
    assert "config #2" in text and "topk must be <= budget=8" in text
    assert "config #3" in text and "budget=999 is out of range" in text
    assert "config #4" in text and "algorithm=none" in text
    assert "config #5" in text and "block_size=12 is not allowed" in text
    assert "config #6" in text and "algorithm='eagle' is not allowed" in text
    assert "config #7" in text and "unknown key(s) colour" in text
    assert all("invalid_config" in p for p in problems)


def test_duplicates_are_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="duplicates config #1"):
        make_plan([{"budget": 8, "topk": 4}, {"budget": "8", "topk": "4"}], tmp_path=tmp_path)


def test_empty_grid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="empty"):
        make_plan([], tmp_path=tmp_path)


def test_sim_fault_only_for_simulated_engine(tmp_path: Path) -> None:
    raws: list[dict[str, object]] = [{"budget": 8, "topk": 4, "sim_fault": "crash-on-load"}]
    plan = make_plan(raws, tmp_path=tmp_path, simulated=True)
    cfg = plan.configs[0]
    assert cfg.sim_fault == "crash-on-load"
    assert cfg.label == "ddtree-b8-t4-wnone-bs8-fault-crash-on-load"
    assert cfg.extravars()["sim_fault"] == "crash-on-load"
    with pytest.raises(PlanError, match="only allowed for a simulated-engine inventory"):
        make_plan(raws, tmp_path=tmp_path, simulated=False)


def test_unknown_sim_fault_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="unknown fault"):
        make_plan([{"budget": 8, "topk": 4, "sim_fault": "explode"}], tmp_path=tmp_path)


def test_extravars_use_short_keys() -> None:
    cfg = validate_config({"algorithm": "dflash", "block_size": 8}, simulated=True)
    assert cfg.extravars() == {"algorithm": "dflash", "window": "none", "block_size": 8}
    cfg = validate_config({"algorithm": "none"}, simulated=True)
    assert cfg.extravars() == {"algorithm": "none"}
    cfg = validate_config({"budget": 8, "topk": 4, "window": 2048, "sim_fault": "mask-offset"}, simulated=True)
    assert cfg.extravars() == {
        "algorithm": "ddtree",
        "budget": 8,
        "topk": 4,
        "window": 2048,
        "block_size": 8,
        "sim_fault": "mask-offset",
    }


def test_invalid_default_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="sweep_default_config"):
        make_plan([{"budget": 8, "topk": 4}], tmp_path=tmp_path, default={"budget": 8, "topk": 40})


def _earlier_result(**blocks: dict[str, Any]) -> dict[str, Any]:
    """A result of an earlier run on testhost, with the given blocks."""
    doc: dict[str, Any] = dict(
        new_result(run_id="old", label="x", config={}, extra_vars={}, engine_kind="simulated",
                   bench_settings={}, started_at="2026-11-29T09:00:00+00:00")
    )  # fmt: skip
    doc.update(blocks, fingerprint={"host": "testhost"}, finished_at="2026-11-29T09:01:00+00:00", wall_s=60.0)
    return doc


def test_estimate_from_inventory_and_history(tmp_path: Path) -> None:
    bench = BenchPlan(contexts=(60,), concurrency=(1, 8), repeats=1, max_tokens=16)
    target = make_target(hostvars={"sweep_load_time_s": 400, "sweep_cell_time_s": 30, "sweep_gates_time_s": 60})
    cfgs = [validate_config({"budget": 8, "topk": 4}, simulated=True)]
    est = estimate(target, cfgs, bench, tmp_path)
    assert est["per_config_s"] == 2 * 400 + 2 * 30 + 60  # two restarts: the lossless gate has its own
    assert est["total_s"] == est["per_config_s"] + 400  # plus the restore
    assert est["restarts"] == 2 + 1
    shared = estimate(target, cfgs, bench, tmp_path, lossless=LosslessRestart(SHARED))
    assert shared["per_config_s"] == 400 + 2 * 30 + 60 and shared["restarts"] == 1 + 1
    deployed = estimate(target, cfgs, bench, tmp_path, lossless=LosslessRestart(inventory_deterministic=True))
    assert deployed["per_config_s"] == shared["per_config_s"]  # the production restart serves the gate too
    # history: earlier runs on the same host give the load time
    doc = _earlier_result(
        reconfigure={"time_to_ready_s": 123.0},
        bench={"cells": [{}, {}], "settings": {"repeats": 1, "max_tokens": 16}},
        timing={"bench_s": 50.0, "gates_s": 30.0},
    )
    path = tmp_path / "old-run" / "configs" / "x.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    est = estimate(make_target(), cfgs, bench, tmp_path)
    assert est["load_s_per_config"] == 123.0
    assert est["bench_s_per_cell"] == 25.0
    assert est["gates_s_per_config"] == 30.0


def test_target_endpoint_and_engine_from_vars() -> None:
    resolved = {"h1": {"ansible_host": "10.0.0.5", "sglang_service_port": 30010, "sglang_service_engine": "simulated"}}
    target = load_target(Path(), resolved=resolved)
    assert target.endpoint.base_url == "http://10.0.0.5:30010"
    assert target.simulated
    resolved = {"h1": {"sweep_endpoint_url": "http://127.0.0.1:4000/", "sglang_service_engine": "sglang"}}
    target = load_target(Path(), resolved=resolved)
    assert target.endpoint.base_url == "http://127.0.0.1:4000"
    assert target.engine_kind == "real"


def test_several_hosts_need_a_limit() -> None:
    resolved: dict[str, dict[str, object]] = {"h1": {}, "h2": {}}
    with pytest.raises(PlanError, match="--limit-hosts"):
        load_target(Path(), resolved=resolved)
    assert load_target(Path(), resolved=resolved, limit="h2").host == "h2"


def test_format_duration() -> None:
    assert format_duration(5) == "5s"
    assert format_duration(125) == "2m05s"
    assert format_duration(3 * 3600 + 60) == "3h01m"


def test_estimate_says_when_it_has_no_measured_history(tmp_path: Path) -> None:
    bench = BenchPlan(contexts=(60,), concurrency=(1,), repeats=1, max_tokens=16)
    cfgs = [validate_config({"budget": 8, "topk": 4}, simulated=True)]
    fresh = estimate(make_target(), cfgs, bench, tmp_path)
    assert estimate_basis(fresh) == "no measured history: estimate from defaults"
    doc = _earlier_result(
        reconfigure={"time_to_ready_s": 80.0},
        bench={"cells": [{}], "settings": {"repeats": 1, "max_tokens": 16}},
        timing={"reconfigure_s": 95.0, "bench_s": 5.0, "gates_s": 3.0},
    )
    for run in ("a", "b"):
        path = tmp_path / run / "configs" / "x.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(doc), encoding="utf-8")
    off_schema = {k: v for k, v in doc.items() if k != "bench"}  # refused by load_result: not history
    (tmp_path / "c" / "configs").mkdir(parents=True)
    (tmp_path / "c" / "configs" / "x.json").write_text(json.dumps(off_schema), encoding="utf-8")
    measured = estimate(make_target(), cfgs, bench, tmp_path)
    assert measured["load_s_per_config"] == 95.0  # the measured restart, not the default
    assert estimate_basis(measured) == "measured history: 2 config(s) of earlier runs on this host"


def test_a_grid_entry_may_carry_extra_vars_recorded_in_the_plan(tmp_path: Path) -> None:
    raws: list[dict[str, object]] = [
        {"budget": 8, "topk": 4, "extra_vars": {"sglang_service_ready_timeout": 2400}},
        {"budget": 16, "topk": 4},
    ]
    plan = make_plan(raws, tmp_path=tmp_path, default=None)
    doc = plan.as_dict("r1")
    configs = {c["label"]: c for c in doc["configs"]}  # type: ignore[union-attr]
    assert configs["ddtree-b8-t4-wnone-bs8"]["extra_vars"] == {"sglang_service_ready_timeout": 2400}
    assert "extra_vars" not in configs["ddtree-b16-t4-wnone-bs8"]
    assert "extra_vars" not in configs["ddtree-b8-t4-wnone-bs8"]["config"]  # the config (and label) are unchanged


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"budget": 12}, "extra_vars budget: set by the sweep per config"),
        ({"sglang_service_ddtree_budget": 12}, "the role variable of the config key 'budget'"),
        ({"sglang_service_report_path": "/x"}, "extra_vars sglang_service_report_path: set by the sweep"),
        ("ready_timeout=10", "extra_vars: expected a mapping of variable -> value"),
    ],
)
def test_a_grid_entrys_extra_vars_are_refused_like_the_clis(tmp_path: Path, extra: object, words: str) -> None:
    with pytest.raises(PlanError, match="config #1") as info:
        make_plan([{"budget": 8, "topk": 4, "extra_vars": extra}], tmp_path=tmp_path, default=None)
    assert words in str(info.value)
