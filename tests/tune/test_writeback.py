"""Writing the winner back: a host_vars file with provenance, a diff first, and proof it is in effect."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml

from repro_py.sweep.grid import validate_config
from repro_py.sweep.inventory import load_target
from repro_py.tune import writeback

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = {"run id": "r1", "manifest sha256": "ab" * 32, "date": "2025-01-01", "objective": "single-stream latency"}


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventory" / "local", inv)
    return inv


def test_render_sets_the_role_variables_under_a_provenance_comment() -> None:
    cfg = validate_config({"algorithm": "ddtree", "budget": 5, "topk": 1, "window": "none", "block_size": 16},
                          simulated=True)  # fmt: skip
    text = writeback.render(cfg, PROVENANCE)
    lines = text.splitlines()
    assert lines[0] == "---" and "# run id: r1" in lines and f"# manifest sha256: {'ab' * 32}" in lines
    assert "# date: 2025-01-01" in lines
    doc = yaml.safe_load(text)
    assert doc["sglang_service_spec_algorithm"] == "ddtree"
    assert (doc["sglang_service_ddtree_budget"], doc["sglang_service_ddtree_topk"]) == (5, 1)
    assert doc["sglang_service_draft_window"] is None and doc["sglang_service_block_size"] == 16
    assert doc["sweep_default_config"] == {"algorithm": "ddtree", "budget": 5, "topk": 1, "block_size": 16}
    baseline = yaml.safe_load(writeback.render(validate_config({"algorithm": "none"}, simulated=True), PROVENANCE))
    assert baseline["sglang_service_spec_algorithm"] == "none" and baseline["sglang_service_ddtree_budget"] is None


def test_diff_first_then_write_and_read_back_through_ansible_inventory(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    cfg = validate_config({"algorithm": "ddtree", "budget": 6, "topk": 2, "window": 2048, "block_size": 8},
                          simulated=True)  # fmt: skip
    target = load_target(inv)
    assert writeback.in_effect(target, cfg)  # the inventory runs b8/t4 now
    change = writeback.propose(inv, target.host, cfg, PROVENANCE)
    assert change.path == inv / "host_vars" / "sglang-testhost" / "tune.yml"
    assert not change.path.exists() and change.changed
    diff = change.diff()
    assert diff.startswith("--- /dev/null\n") and "+sglang_service_ddtree_budget: 6" in diff
    assert writeback.write_change(change, target, cfg) == []
    assert change.path.read_text() == change.new
    # the group vars are untouched; the host var wins
    assert "sglang_service_ddtree_budget: 8" in (inv / "group_vars" / "all" / "service.yml").read_text()
    again = writeback.propose(inv, target.host, cfg, PROVENANCE)
    assert not again.changed and again.diff() == ""


def test_a_host_vars_file_in_the_way_is_named(tmp_path: Path) -> None:
    inv = _inventory(tmp_path)
    (inv / "host_vars").mkdir()
    (inv / "host_vars" / "sglang-testhost.yml").write_text("---\nfoo: 1\n")
    cfg = validate_config({"algorithm": "ddtree", "budget": 6, "topk": 2}, simulated=True)
    with pytest.raises(writeback.WriteBackError, match=r"sglang-testhost\.yml exists as a file"):
        writeback.propose(inv, "sglang-testhost", cfg, PROVENANCE)


def test_manifest_hash_needs_a_sealed_run(tmp_path: Path) -> None:
    with pytest.raises(writeback.WriteBackError, match=r"MANIFEST\.sha256 is missing"):
        writeback.manifest_sha256(tmp_path)
    (tmp_path / "MANIFEST.sha256").write_text("x\n")
    assert writeback.manifest_sha256(tmp_path) == hashlib.sha256(b"x\n").hexdigest()
