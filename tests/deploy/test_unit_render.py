"""The rendered unit passes `systemd-analyze verify`, for both engines, with identical flags."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repro_py import spec_config

VENV = str(Path(sys.executable).parent.parent)  # a real python, so verify finds ExecStart's binary


def render(run_playbook, out: Path, *extra: str) -> tuple[str, dict]:
    out.mkdir(parents=True, exist_ok=True)
    res = run_playbook(
        "-i",
        "localhost,",
        "tests/deploy/render_unit.yml",
        "-e",
        f"out_dir={out}",
        "-e",
        f"sglang_service_venv_path={VENV}",
        "-e",
        "sglang_service_name=sglang-test",
        *extra,
    )
    assert res.returncode == 0, res.stdout[-3000:]
    return (out / "sglang-test.service").read_text(), json.loads((out / "argv.json").read_text())


def exec_start_words(unit: str) -> list[str]:
    lines = unit.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ExecStart="))
    joined = ""
    for ln in lines[start:]:
        joined += ln.rstrip("\\").strip() + " "
        if not ln.endswith("\\"):
            break
    return joined.removeprefix("ExecStart=").split()


@pytest.mark.parametrize("engine", ["sglang", "simulated"])
def test_unit_verifies(run_playbook, tmp_path, engine):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    unit, _ = render(
        run_playbook, tmp_path, "-e", f"sglang_service_engine={engine}", "-e", '{"sglang_service_api_key": "k-123"}'
    )
    res = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / "sglang-test.service")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "sglang-test.service" not in res.stderr, res.stderr  # no warning about this unit
    assert unit.startswith("# Ansible managed")
    assert "k-123" not in unit  # the key lives in the 0640 keys file only
    assert "--api-key" not in unit  # never on the command line: ps shows it to every user
    assert "sglang-launch.py --keys-file /etc/sglang/sglang-test.keys.json " in unit


def test_both_engines_get_identical_flags(run_playbook, tmp_path):
    real, real_argv = render(run_playbook, tmp_path / "real", "-e", "sglang_service_engine=sglang")
    sim, sim_argv = render(
        run_playbook, tmp_path / "sim", "-e", "sglang_service_engine=simulated", "-e", "sim_fault=crash-on-load"
    )
    assert real_argv["module"] == "sglang.launch_server"
    assert sim_argv["module"] == "repro_py.simengine"
    sim_only = sim_argv["argv"][len(real_argv["argv"]) :]
    assert sim_argv["argv"][: len(real_argv["argv"])] == real_argv["argv"]
    assert all(w.startswith("--sim-") for w in sim_only[::2]), sim_only
    assert sim_only[-2:] == ["--sim-fault", "crash-on-load"]
    assert not any(w.startswith("--sim-") for w in real_argv["argv"])
    # The unit's ExecStart is exactly python LAUNCHER MODULE + argv.
    launcher = "/usr/local/libexec/sglang-deploy/sglang-launch.py"
    assert exec_start_words(real) == [f"{VENV}/bin/python", launcher, "sglang.launch_server", *real_argv["argv"]]
    assert exec_start_words(sim) == [f"{VENV}/bin/python", launcher, "repro_py.simengine", *sim_argv["argv"]]


def test_spec_flags_come_from_spec_config(run_playbook, tmp_path):
    _, argv = render(
        run_playbook,
        tmp_path,
        "-e",
        "budget=12",
        "-e",
        "topk=6",
        "-e",
        "window=none",
        "-e",
        "sglang_service_drafter_path=/d",
    )
    cfg = spec_config.validate({"algorithm": "ddtree", "budget": 12, "topk": 6, "window": None, "block_size": 8})
    flags = spec_config.to_engine_flags(cfg, drafter_path="/d")
    words = argv["argv"]
    i = words.index("--speculative-algorithm")
    assert words[i : i + len(flags)] == flags


def test_unit_hardening_keeps_gpus_visible(run_playbook, tmp_path):
    unit, _ = render(run_playbook, tmp_path)
    for directive in (
        "NoNewPrivileges=yes",
        "ProtectSystem=full",
        "PrivateTmp=yes",
        "KillMode=mixed",
        "Restart=on-failure",
        "TimeoutStartSec=1200",
        "User=sglang",
    ):
        assert f"\n{directive}\n" in unit, directive
    for forbidden in ("PrivateDevices=", "MemoryDenyWriteExecute=", "SystemCallFilter=", "DevicePolicy=closed"):
        assert forbidden not in unit, forbidden
    unit_off, _ = render(run_playbook, tmp_path / "off", "-e", '{"sglang_service_hardening": false}')
    assert "NoNewPrivileges" not in unit_off


def test_the_main_process_drains_and_the_unit_starts_after_persistenced(run_playbook, tmp_path):
    unit, _ = render(run_playbook, tmp_path)
    assert "\nKillMode=mixed\n" in unit and "KillMode=control-group" not in unit
    assert "\nAfter=network-online.target nvidia-persistenced.service\n" in unit


def test_kimi_flags_of_sglang_0_5_23(run_playbook, tmp_path):
    _, argv = render(run_playbook, tmp_path, "-e", '{"sglang_service_disable_cuda_graph": true}')
    words = " ".join(argv["argv"])
    assert "--tool-call-parser kimi_k2" in words
    assert "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled" in words
    assert "--disable-cuda-graph" not in words  # deprecated in 0.5.23


def test_gpu_device_nodes_are_created_then_opened_in_the_sandbox(run_playbook, tmp_path):
    nodes = '{"sglang_service_gpu_device_nodes": ["/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia0", "/dev/nvidia-uvm"]}'
    unit, _ = render(run_playbook, tmp_path, "-e", nodes, "-e", "_sglang_service_modprobe_present=true")
    lines = [ln for ln in unit.splitlines() if ln.startswith("ExecStartPre=")]
    assert lines == [
        "ExecStartPre=-+/usr/bin/nvidia-modprobe -c 0 -c 1 -c 255",
        "ExecStartPre=-+/usr/bin/nvidia-modprobe -u -c 0",
        f"ExecStartPre={VENV}/bin/python /usr/local/libexec/sglang-deploy/sglang-device-check.py "
        "/dev/nvidia-uvm /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl",
    ]
    assert unit.index("ExecStartPre=") < unit.index("ExecStart=")
    no_gpu, _ = render(run_playbook, tmp_path / "none")
    assert "ExecStartPre=" not in no_gpu


def test_the_unit_waits_for_the_weights_mounts(run_playbook, tmp_path):
    """At boot the server must not start (and burn its start limit) before /models is mounted."""
    unit, _ = render(
        run_playbook, tmp_path / "ddtree", "-e", '{"sglang_service_model_path": "/models/Kimi K2.6"}',
        "-e", "sglang_service_drafter_path=/mnt/drafters/Kimi-K2.6-DFlash",
    )  # fmt: skip
    unit_section = unit.split("[Service]")[0]
    assert 'RequiresMountsFor="/models/Kimi K2.6" /mnt/drafters/Kimi-K2.6-DFlash\n' in unit_section
    baseline, _ = render(run_playbook, tmp_path / "baseline", "-e", "algorithm=none")
    assert "RequiresMountsFor=/models/Kimi-K2.6\n" in baseline.split("[Service]")[0]  # no drafter for the baseline


def test_deterministic_inference_is_rendered_for_both_engines(run_playbook, tmp_path):
    """The losslessness gate's oracle: the flag reaches sglang's command line (and the simulated engine's, which
    accepts and echoes it as sglang does); off by default."""
    _, plain = render(run_playbook, tmp_path / "off")
    assert "--enable-deterministic-inference" not in plain["argv"]
    on = '{"sglang_service_deterministic_inference": true}'
    _, real = render(run_playbook, tmp_path / "real", "-e", "sglang_service_engine=sglang", "-e", on)
    _, sim = render(run_playbook, tmp_path / "sim", "-e", "sglang_service_engine=simulated", "-e", on)
    for argv in (real["argv"], sim["argv"]):
        words = " ".join(argv)
        assert "--attention-backend triton --enable-deterministic-inference" in words
