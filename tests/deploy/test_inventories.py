"""The shipped inventories: placeholder hosts only, valid sweep grids, the chosen default config."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from repro_py import spec_config

INVENTORIES = ["local", "ct200", "b300"]


def group_vars(name: str) -> dict:
    merged: dict = {}
    for path in sorted((ROOT / "inventory" / name / "group_vars" / "all").glob("*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


@pytest.mark.parametrize("name", INVENTORIES)
def test_sweep_grid_is_valid(name):
    gv = group_vars(name)
    grid = gv["sweep_grid"]
    assert len(grid) >= 4
    labels = set()
    for entry in [*grid, gv["sweep_default_config"]]:
        short = {k: v for k, v in entry.items() if k != "sim_fault"}
        cfg = spec_config.validate(short, drafter_block_size=8)
        labels.add(cfg.label + ("-fault-" + entry["sim_fault"] if "sim_fault" in entry else ""))
    assert len(labels) == len(grid) or name != "local"
    assert spec_config.validate(gv["sweep_default_config"]).label == "ddtree-b8-t4-w2048-bs8"


def test_local_grid_exercises_faults():
    faults = [e.get("sim_fault") for e in group_vars("local")["sweep_grid"]]
    assert "crash-on-load" in faults and "mask-offset" in faults


@pytest.mark.parametrize("name", ["ct200", "b300"])
def test_production_hosts_are_placeholders(name):
    hosts = yaml.safe_load((ROOT / "inventory" / name / "hosts.yml").read_text())
    names = list(hosts["all"]["children"]["sglang_servers"]["hosts"])
    assert names and all(n.endswith(".example.internal") for n in names)


def test_inventory_defaults_are_the_chosen_config():
    for name in INVENTORIES:
        gv = group_vars(name)
        got = (gv["sglang_service_block_size"], gv["sglang_service_ddtree_budget"], gv["sglang_service_ddtree_topk"])
        assert got == (8, 8, 4), name
        assert gv["sglang_service_draft_window"] == 2048
    assert group_vars("ct200")["sglang_service_disable_cuda_graph"] is True
    assert group_vars("b300")["sglang_service_disable_cuda_graph"] is False
    assert (group_vars("ct200")["sglang_service_tp_size"], group_vars("ct200")["sglang_service_ep_size"]) == (8, 8)
