"""Command line: sglang 0.5.23 flag names and refusals; bad flags exit 2 naming flag and value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro_py.simengine import cli, launch_settings
from repro_py.simengine.fixtures import main as fixtures_main
from repro_py.simengine.fixtures import write_model_dirs
from repro_py.simengine.testing import run_engine_cli


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    return write_model_dirs(tmp_path)


def base(d: dict[str, str]) -> list[str]:
    return ["--model-path", d["model_path"], "--speculative-draft-model-path", d["draft_model_path"]]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(argv) == 2
    return capsys.readouterr().err


def test_ddtree_alias_resolves_to_dflash_tree_mode(dirs: dict[str, str]) -> None:
    s = launch_settings.resolve(
        [
            *base(dirs),
            "--speculative-algorithm",
            "DDTREE",
            "--speculative-ddtree-budget",
            "12",
            "--speculative-ddtree-topk-cap",
            "6",
            "--speculative-draft-window-size",
            "2048",
            "--tp-size",
            "8",
            "--ep-size",
            "8",
            "--mem-fraction-static",
            "0.85",
            "--attention-backend",
            "triton",
            "--cuda-graph-max-bs-decode",
            "64",
            "--disable-cuda-graph",
            "--context-length",
            "32k",
            "--trust-remote-code",
            "--enable-metrics",
            "--reasoning-parser",
            "kimi_k2",
        ]
    )
    assert s.spec.algorithm == "ddtree" and s.spec.budget == 12 and s.spec.topk == 6
    assert s.args["speculative_algorithm"] == "DFLASH"
    assert s.args["speculative_num_draft_tokens"] == 8 == s.args["speculative_dflash_block_size"]  # from config.json
    assert s.args["speculative_draft_window_size"] == 2048
    assert s.context_length == 32000 and s.args["disable_cuda_graph"] is True
    assert s.max_running_requests == 48  # DFLASH's reset, as sglang does


def test_dflash_with_budget_is_tree_mode_and_plain_dflash_is_chain(dirs: dict[str, str]) -> None:
    s = launch_settings.resolve(
        [
            *base(dirs),
            "--speculative-algorithm",
            "dflash",
            "--speculative-ddtree-budget",
            "8",
            "--speculative-ddtree-topk-cap",
            "4",
        ]
    )
    assert s.spec.algorithm == "ddtree"
    s = launch_settings.resolve([*base(dirs), "--speculative-algorithm", "DFLASH"])
    assert s.spec.algorithm == "dflash" and s.spec.block_size == 8
    s = launch_settings.resolve(["--model-path", dirs["model_path"]])
    assert s.spec.algorithm == "none" and s.args["speculative_algorithm"] is None


def test_block16_on_8_trained_drafter_serves_with_the_sglang_warning(dirs: dict[str, str]) -> None:
    s = launch_settings.resolve(
        [
            *base(dirs),
            "--speculative-algorithm",
            "DDTREE",
            "--speculative-dflash-block-size",
            "16",
            "--speculative-ddtree-budget",
            "16",
            "--speculative-ddtree-topk-cap",
            "4",
        ]
    )
    assert s.spec.block_size == 16 and s.drafter_block_size == 8
    assert any("DFLASH block size mismatch" in w for w in s.warnings)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            [
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "0",
                "--speculative-ddtree-topk-cap",
                "1",
            ],
            "--speculative-ddtree-budget 0",
        ),
        (
            [
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "8",
                "--speculative-ddtree-topk-cap",
                "0",
            ],
            "--speculative-ddtree-topk-cap 0",
        ),
        (
            [
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "8",
                "--speculative-ddtree-topk-cap",
                "9",
            ],
            "--speculative-ddtree-topk-cap 9",
        ),
        (["--speculative-algorithm", "DDTREE", "--speculative-ddtree-topk-cap", "4"], "--speculative-ddtree-budget"),
        (
            ["--speculative-algorithm", "DFLASH", "--speculative-ddtree-topk-cap", "4"],
            "--speculative-ddtree-topk-cap 4",
        ),
        (
            [
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "8",
                "--speculative-ddtree-topk-cap",
                "4",
                "--speculative-dflash-block-size",
                "12",
            ],
            "--speculative-dflash-block-size 12",
        ),
        (
            [
                "--speculative-algorithm",
                "DDTREE",
                "--speculative-ddtree-budget",
                "8",
                "--speculative-ddtree-topk-cap",
                "4",
                "--speculative-draft-window-size",
                "4",
            ],
            "--speculative-draft-window-size 4",
        ),
        (["--speculative-algorithm", "EAGLE3"], "--speculative-algorithm EAGLE3"),
        (["--speculative-algorithm", "MEDUSA"], "--speculative-algorithm MEDUSA"),
        (["--sim-fault", "explode"], "explode"),
        (["--sim-fault", "crash-after:x"], "crash-after:x"),
        (["--sim-speed", "0"], "--sim-speed 0"),
        (
            ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "12"],
            "--speculative-num-draft-tokens 12",
        ),
        (
            [
                "--speculative-algorithm",
                "DFLASH",
                "--speculative-num-draft-tokens",
                "16",
                "--speculative-dflash-block-size",
                "8",
            ],
            "--speculative-num-draft-tokens 16",
        ),
        (["--context-length", "999999999"], "--context-length 999999999"),
    ],
)
def test_invalid_values_exit_2_naming_flag_and_value(
    dirs: dict[str, str], extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert needle in refused([*base(dirs), *extra], capsys)


def test_ddtree_flags_without_an_algorithm_are_refused(
    dirs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(["--model-path", dirs["model_path"], "--speculative-ddtree-budget", "8"], capsys)
    assert "--speculative-ddtree-budget 8" in err and "algorithm=none" in err


def test_model_path_must_be_a_directory_with_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"--model-path '{tmp_path / 'nope'}'" in refused(["--model-path", str(tmp_path / "nope")], capsys)


def test_unknown_and_ambiguous_flags_are_argparse_errors(
    dirs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert "unrecognized arguments: --no-such-flag" in refused([*base(dirs), "--no-such-flag"], capsys)
    # sglang 0.5.23 has only --cuda-graph-max-bs-{decode,prefill}; the bare flag is an ambiguous prefix there
    assert "ambiguous option: --cuda-graph-max-bs" in refused([*base(dirs), "--cuda-graph-max-bs", "64"], capsys)


def test_a_real_process_refuses_bad_flags(dirs: dict[str, str]) -> None:
    proc = run_engine_cli(
        [
            *base(dirs),
            "--speculative-algorithm",
            "DDTREE",
            "--speculative-ddtree-budget",
            "4",
            "--speculative-ddtree-topk-cap",
            "5",
        ]
    )
    assert proc.returncode == 2
    assert "--speculative-ddtree-topk-cap 5" in proc.stderr and "budget=4" in proc.stderr


def test_fixtures_main_writes_simulated_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fixtures_main([str(tmp_path / "m"), "--drafter-block-size", "16"]) == 0
    paths = json.loads(capsys.readouterr().out)
    drafter = json.loads((Path(paths["draft_model_path"]) / "config.json").read_text())
    assert drafter["_simulated"] is True and drafter["dflash_config"]["block_size"] == 16
    target = json.loads((Path(paths["model_path"]) / "config.json").read_text())
    assert "SIMULATED" in target["_note"]
