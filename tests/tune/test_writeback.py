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
    (inv / "host_vars").mkdir(exist_ok=True)  # inventory/local has one (the connection, in a directory)
    (inv / "host_vars" / "sglang-testhost.yml").write_text("---\nfoo: 1\n")
    cfg = validate_config({"algorithm": "ddtree", "budget": 6, "topk": 2}, simulated=True)
    with pytest.raises(writeback.WriteBackError, match=r"sglang-testhost\.yml exists as a file"):
        writeback.propose(inv, "sglang-testhost", cfg, PROVENANCE)


def test_manifest_hash_needs_a_sealed_run(tmp_path: Path) -> None:
    with pytest.raises(writeback.WriteBackError, match=r"MANIFEST\.sha256 is missing"):
        writeback.manifest_sha256(tmp_path)
    (tmp_path / "MANIFEST.sha256").write_text("x\n")
    assert writeback.manifest_sha256(tmp_path) == hashlib.sha256(b"x\n").hexdigest()


def _cell(values: list[float]) -> dict[str, object]:
    reps = [{"output_tps": v, "errors": 0, "ok": 1, "ttft_ms": {"p50": 20.0}} for v in values]
    return {"context": 60, "concurrency": 1, "status": "ok", "median": {"accept_length": 4.0}, "repeats": reps}


def test_no_write_back_unless_the_winner_beats_the_current_config_with_the_stated_confidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rich.console import Console  # noqa: PLC0415

    from repro_py.sweep.state import RunDir  # noqa: PLC0415
    from repro_py.tune.ladder import make_ladder  # noqa: PLC0415
    from repro_py.tune.records import Proposal  # noqa: PLC0415
    from tests.tune.conftest import make_loop  # noqa: PLC0415

    inv = _inventory(tmp_path)
    target = load_target(inv)

    def offer(values: dict[str, list[float]], run: str) -> str:
        search = make_loop(tmp_path, ladder=make_ladder(full_tokens=64, screen_tokens=64), run=run).search
        for label, repeats in values.items():
            search.start(Proposal(search.space.by_label()[label], "test"))
            search.judge(label, 0, [_cell(repeats)])
            search.finish(label, {"status": "ok", "gates": {"passed": True, "coding": {"pass_rate": 1.0}}})
        run_dir = RunDir(tmp_path / "results" / run)
        (run_dir.path / "MANIFEST.sha256").write_text("x\n")
        code = writeback.offer(
            Console(stderr=True), search, run_dir, [target], inventory=inv, results=tmp_path, write=False, ask=False
        )
        assert code == 0
        return " ".join(capsys.readouterr().err.split())

    # 2% ahead of the current config (b8-t4) with a 1% spread: not ahead with 90% confidence
    out = offer({"ddtree-b8-t4-w2048-bs8": [100.0, 101.0, 99.0], "ddtree-b5-t1-w2048-bs8": [102.0, 103.0, 101.0]}, "a")
    assert "proposed change" not in out, out
    assert "nothing to write back for single-stream: +2.0% over the inventory's current config" in out
    assert "below the 90% asked: the current config stays" in out
    # 30% ahead: proposed, with the comparison in the provenance
    out = offer({"ddtree-b8-t4-w2048-bs8": [100.0, 101.0, 99.0], "ddtree-b5-t1-w2048-bs8": [130.0, 131.0, 129.0]}, "b")
    assert "proposed change to the inventory" in out and "+# versus the current config: +30.0% over" in out
