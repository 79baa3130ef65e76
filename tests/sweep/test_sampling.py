"""Sampling settings in a sweep: per run (--temperature/--top-p) and per grid entry, a measurement setting that
never reaches the play, in every label, digest and result; bad values refused before any restart; and a sweep
at temperature 0.7 on the simulated engines, where every config (DDTree included) is measured at T=0.7 and the
sampled gate compares each speculative config's samples with the baseline's."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sampling_settings import Sampling
from repro_py.sweep import cli
from repro_py.sweep.errors import PlanError
from repro_py.sweep.grid import validate_all, validate_config
from repro_py.sweep.reconfigure import AnsibleReconfigurer
from tests.sweep.test_cli import _sweep, write_inventory

DDTREE = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}


def test_sampling_is_part_of_the_label_and_digest_and_never_of_the_play() -> None:
    greedy = validate_config(DDTREE, simulated=True)
    sampled = validate_config({**DDTREE, "temperature": 0.7, "top_p": 0.95}, simulated=True)
    # the greedy default keeps the label and digest every earlier result has
    assert greedy.label == "ddtree-b8-t4-w2048-bs8"
    assert greedy.config_sha256 == hashlib.sha256(json.dumps(DDTREE, sort_keys=True).encode()).hexdigest()
    assert sampled.label == "ddtree-b8-t4-w2048-bs8-temp0.7-topp0.95"
    assert sampled.short() == {**DDTREE, "temperature": 0.7, "top_p": 0.95}
    assert sampled.config_sha256 != greedy.config_sha256  # --resume never takes one for the other
    assert sampled.extravars() == greedy.extravars()  # the same restart: not an engine setting
    assert sampled.planned()["sampling"] == {"temperature": 0.7, "top_p": 0.95}
    # the run's setting for entries that name none; an entry's own wins
    run = Sampling(1.0, 1.0)
    configs = validate_all([DDTREE, {**DDTREE, "temperature": 0}], simulated=True, sampling=run)
    assert [c.sampling for c in configs] == [run, Sampling(0.0, 1.0)]
    assert [c.label for c in configs] == ["ddtree-b8-t4-w2048-bs8-temp1-topp1", "ddtree-b8-t4-w2048-bs8"]


def test_bad_sampling_is_refused_before_any_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("reconfigure must not run for a refused plan")

    monkeypatch.setattr(AnsibleReconfigurer, "reconfigure", never)
    inv = write_inventory(tmp_path / "inv.yml", grid=[DDTREE, {**DDTREE, "budget": 16, "top_p": 0}])
    results = tmp_path / "results"
    assert cli.main([str(inv), "--results", str(results), "--temperature", "-1"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "nothing was restarted" in err
    assert "--temperature/--top-p: temperature=-1.0: must be a finite number >= 0 (0 = greedy decoding)" in err
    assert cli.main([str(inv), "--results", str(results)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "config #2" in err and "top_p=0: must be a number in (0, 1]" in err
    assert not results.exists()


def test_a_resumed_run_keeps_its_sampling_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path / "inv.yml", grid=[DDTREE])
    run_dir = tmp_path / "results" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "plan.json").write_text(json.dumps({
        "run_id": "r1", "host": "simhost", "configs": [{"label": "x", "config": DDTREE}],
        "sampling": {"temperature": 0.7, "top_p": 1.0}, "lossless_restart": {"mode": "separate"},
    }))  # fmt: skip
    args = [str(inv), "--results", str(tmp_path / "results"), "--resume", "--run-id", "r1", "--dry-run"]
    assert cli.main([*args, "--temperature", "0"]) == ExitCode.USAGE
    assert "measures at T=0.7, top_p=1; --temperature/--top-p give T=0 (greedy), top_p=1" in capsys.readouterr().err
    assert cli.main(args) == ExitCode.OK  # no flags: the run's own setting
    assert "ddtree-b8-t4-w2048-bs8-temp0.7-topp1" in capsys.readouterr().out


def test_refusal_lists_are_plan_errors() -> None:
    with pytest.raises(PlanError) as err:
        validate_all([{**DDTREE, "temperature": "hot"}], simulated=True)
    assert "temperature='hot': must be a finite number >= 0" in str(err.value.problems)


def test_a_sweep_at_temperature_0_7_records_it_everywhere_and_measures_ddtree(tmp_path: Path) -> None:
    """Real engines (local processes), the bundle's bench and gates, the report: the OpenAI client's kind of
    request (sampled) against a DFLASH config, a DDTree one and the baseline."""
    grid = [{"algorithm": "none"}, {"algorithm": "dflash", "window": 2048, "block_size": 8}, DDTREE]
    inv = write_inventory(tmp_path / "inv.yml", grid=grid)
    results = tmp_path / "results"
    bench = ["--bench-contexts", "60", "--bench-concurrency", "1", "2", "--repeats", "1", "--max-tokens", "24"]
    proc = _sweep([str(inv), "--reconfigurer", "local", "--results", str(results), "--run-id", "t07", *bench,
                   "--temperature", "0.7", "--top-p", "0.95", "--no-restore"])
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == ExitCode.OK, out
    run_dir = results / "t07"
    docs = {p.stem: json.loads(p.read_text()) for p in (run_dir / "configs").glob("*.json")}
    suffix = "-temp0.7-topp0.95"
    assert set(docs) == {f"baseline{suffix}", f"dflash-w2048-bs8{suffix}", f"ddtree-b8-t4-w2048-bs8{suffix}"}
    for doc in docs.values():
        assert doc["sampling"] == {"temperature": 0.7, "top_p": 0.95}
        assert (doc["bench"]["settings"]["temperature"], doc["bench"]["settings"]["top_p"]) == (0.7, 0.95)
        # every config serves sampling: measured at T=0.7, DDTree included
        assert [c["status"] for c in doc["bench"]["cells"]] == ["ok", "ok"], doc["bench"]["cells"]
        assert all(c["median"]["output_tps"] > 0 for c in doc["bench"]["cells"])
        # (the coding gate is not the subject here: a coding-gate timeout on a loaded machine fails the config
        # with gate_failed, never with the benchmark's cause)
        assert doc["status"] == "ok" or doc["failure"]["class"] == "gate_failed", doc["failure"]
    for label in (f"dflash-w2048-bs8{suffix}", f"ddtree-b8-t4-w2048-bs8{suffix}"):
        doc = docs[label]
        assert all(c["median"]["accept_length"] > 1.0 for c in doc["bench"]["cells"])  # measured at T=0.7
        sampled = doc["gates"]["sampled"]  # the sampled gate: its samples against the baseline's
        assert sampled["verdict"] == "same_distribution" and sampled["passed"] is True, sampled
        assert "samples" not in sampled  # the samples live in the run's reference file only
    assert docs[f"baseline{suffix}"]["gates"]["sampled"]["verdict"] == "reference"
    reference = json.loads((run_dir / "sampled-reference.json").read_text())
    assert reference["label"] == f"baseline{suffix}" and len(reference["reference"]["samples"]) == 8
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["sampling"] == {"temperature": 0.7, "top_p": 0.95}

    summary = (run_dir / "summary.md").read_text()
    assert "| sampling | T=0.7, top_p=0.95 |" in summary and "MIXED" not in summary
    assert "Sampling T=0.7, top_p=0.95:" in summary  # the recommendation and the plots
    assert "T=0 (greedy)" not in summary  # nothing in this report was measured greedy
    table = [line for line in summary.splitlines() if line.startswith(("| baseline", "| dflash", "| ddtree"))]
    assert table and all("T=0.7, top_p=0.95" in line for line in table), table
    ddtree_rows = [line for line in table if line.startswith("| ddtree")]
    assert ddtree_rows and not any("crashed_during_benchmark" in line for line in ddtree_rows), ddtree_rows
    assert "| config | sampling | gates | lossless | sampled (T=1, top_p=0.9) |" in summary
    assert "same_distribution (p=" in summary
    check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], check=False, cwd=run_dir,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert yaml.safe_load(inv.read_text())["all"]["vars"]["sweep_grid"] == grid  # the inventory is not touched
