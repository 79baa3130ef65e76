"""The tuner measures at the sampling setting it is given (--temperature/--top-p): refused when out of range
before anything restarts, kept by --resume, in every config's label and result, and in both reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sampling_settings import Sampling
from repro_py.sweep.grid import PlannedConfig, validate_config
from repro_py.tune.cli import main
from repro_py.tune.records import RepeatedConfig, split_label
from tests.tune.test_cli import inventory  # noqa: F401 - the fixture

SPACE = {"configs": [
    {"algorithm": "none"},
    {"algorithm": "dflash", "block_size": 8, "window": 2048},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "block_size": 8, "window": 2048},
]}  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--temperature", "-0.1"], "--temperature/--top-p: temperature=-0.1: must be a finite number >= 0"),
        (["--top-p", "0"], "--temperature/--top-p: top_p=0.0: must be a number in (0, 1]"),
    ],
)
def test_bad_sampling_is_refused_before_anything_restarts(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str  # noqa: F811
) -> None:
    code = main([str(inventory), "--objective", "single-stream", "--results", str(tmp_path / "results"),
                 "--reconfigurer", "local", *flags])  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == ExitCode.USAGE and "nothing was restarted" in err and message in err
    assert not (tmp_path / "results").exists()


def test_a_sampled_tuning_run_records_and_reports_its_setting(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]  # noqa: F811
) -> None:
    space = tmp_path / "space.yml"
    space.write_text(yaml.safe_dump(SPACE))
    results = tmp_path / "results"
    common = [str(inventory), "--objective", "single-stream", "--space", str(space), "--reconfigurer", "local",
              "--results", str(results), "--run-id", "t", "--max-tokens", "24", "--screen-tokens", "8", "--repeats",
              "1", "--screen-repeats", "1", "--max-restarts", "8", "--no-write"]  # fmt: skip
    assert main([*common, "--temperature", "0.7", "--dry-run"]) == ExitCode.OK
    out = " ".join(capsys.readouterr().out.split())
    assert "│ sampling │ T=0.7, top_p=1 in every benchmark request" in out
    # every label of the space carries the setting; the deployed config is still measured right after the baseline
    assert "baseline-temp0.7-topp1, ddtree-b8-t4-w2048-bs8-temp0.7-topp1" in out
    assert main([*common, "--temperature", "0.7"]) == ExitCode.OK
    capsys.readouterr()
    run = results / "t"
    settings = json.loads((run / "tune" / "settings.json").read_text())
    assert settings["sampling"] == {"temperature": 0.7, "top_p": 1.0}
    docs = {p.stem: json.loads(p.read_text()) for p in (run / "configs").glob("*.json")}
    # the current config's second restart (".r2") is measured at the run's setting too
    assert docs and all(split_label(name)[0].endswith("-temp0.7-topp1") for name in docs), sorted(docs)
    assert all(d["sampling"] == {"temperature": 0.7, "top_p": 1.0} for d in docs.values())
    ddtree = docs["ddtree-b8-t4-w2048-bs8-temp0.7-topp1"]  # served by the DDTree server: measured at T=0.7
    cells = ddtree["bench"]["cells"]
    assert cells and all(c["status"] == "ok" for c in cells), cells
    assert all(c["median"]["accept_length"] > 1.0 for c in cells)  # counter-derived, at T=0.7
    assert ddtree["status"] == "ok" or ddtree["failure"]["class"] == "gate_failed", ddtree.get("failure")
    report = (run / "tune" / "report.md").read_text()
    assert "| sampling | T=0.7, top_p=1 in every benchmark request" in report
    assert "Winners at sampling T=0.7, top_p=1:" in report
    assert "| sampling | T=0.7, top_p=1 |" in (run / "summary.md").read_text()
    # --resume keeps the run's setting; another one is refused before anything restarts
    resume = [str(inventory), "--resume", "--run-id", "t", "--results", str(results), "--reconfigurer", "local"]
    assert main([*resume, "--temperature", "1.0", "--no-write"]) == ExitCode.USAGE
    err = " ".join(capsys.readouterr().err.split())
    assert "the run measures at T=0.7, top_p=1; --temperature/--top-p give T=1, top_p=1" in err


def test_a_repeated_restart_of_a_sampled_config_keeps_its_sampling_setting() -> None:
    """The current config's second restart (the between-restart noise) measures at the run's setting too."""
    (cfg,) = [c for c in _sampled_configs() if c.spec.algorithm == "ddtree"]
    again = RepeatedConfig.of(cfg, 2)
    assert again.sampling == cfg.sampling == Sampling(temperature=0.7, top_p=1.0)
    assert again.label == f"{cfg.label}.r2" and again.base_label == cfg.label == "ddtree-b8-t4-w2048-bs8-temp0.7-topp1"
    assert split_label(again.label) == (cfg.label, 2)


def _sampled_configs() -> list[PlannedConfig]:
    return [validate_config(raw, simulated=True, sampling=Sampling(temperature=0.7)) for raw in SPACE["configs"]]
