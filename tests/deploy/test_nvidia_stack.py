"""The NVIDIA stack as a real host presents it: fabric manager found by its binary's version (R580 in NVIDIA's
CUDA repository is ``nvidia-fabricmanager`` 580.x, not ``nvidia-fabricmanager-580``), each GPU's NVLink fabric
registration read from ``nvidia-smi -q`` (the test host's stand-in answers it the same way), and the driver's
packages held and checked against the loaded kernel module in check-only mode."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, load_module

probe = load_module("nvidia_stack_probe", ROOT / "roles/preflight/files/nvidia_stack_probe.py")
STANDIN = ROOT / "testhost" / "fake-gpu"

# The layout of nvidia-smi -q (R580) on an HGX B300 while fabric manager registers the GPUs.
SMI_Q = """
==============NVSMI LOG==============

Driver Version                            : 580.126.20
CUDA Version                              : 13.0

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA B300 SXM6 AC
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : 32766
        Health
            Bandwidth                     : Full
    Compute Mode                          : Default

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA B300 SXM6 AC
    Fabric
        State                             : In Progress
        Status                            : N/A
    Compute Mode                          : Default
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_fabric_state_per_gpu_from_nvidia_smi_q() -> None:
    gpus = probe.parse_fabric(SMI_Q)
    assert [(g["gpu"], g["state"], g["status"], g["ok"]) for g in gpus] == [
        ("00000000:18:00.0", "Completed", "Success", True),
        ("00000000:2A:00.0", "In Progress", "N/A", False),
    ]
    assert gpus[1]["text"] == "GPU 00000000:2A:00.0: State In Progress, Status N/A"
    assert gpus[0]["name"] == "NVIDIA B300 SXM6 AC"  # the Health sub-keys do not leak into the fabric


def test_the_stand_in_nvidia_smi_answers_q_as_the_parser_reads_it(tmp_path: Path) -> None:
    for profile, state, ok in (("b300", "Completed", True), ("rtx-pro-6000", "N/A", False)):
        doc = subprocess.run([sys.executable, str(STANDIN / "state.py"), "--uvm-major", "500", "--profile", profile],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        path = tmp_path / f"{profile}.json"
        path.write_text(doc)
        env = {**os.environ, "FAKE_NVIDIA_STATE": str(path)}
        out = subprocess.run([sys.executable, str(STANDIN / "nvidia-smi"), "-q"], capture_output=True, text=True,
                             check=True, env=env).stdout  # fmt: skip
        gpus = probe.parse_fabric(out)
        assert len(gpus) == 8 and {g["state"] for g in gpus} == {state} and all(g["ok"] is ok for g in gpus)
        caps = subprocess.run([sys.executable, str(STANDIN / "nvidia-smi"), "--query-gpu=index,compute_cap",
                               "--format=csv,noheader"], capture_output=True, text=True, check=True, env=env).stdout
        assert caps.splitlines()[0] == ("0, 10.3" if profile == "b300" else "0, 12.0")


def test_fabric_manager_is_found_by_its_binary_whatever_the_package(tmp_path: Path, monkeypatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # what R580's nv-fabricmanager prints; dpkg knows no nvidia-fabricmanager-580 on such a host
    _executable(bindir / "nv-fabricmanager", "#!/bin/sh\necho 'Fabric Manager version is : 580.126.20'\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    found = probe.fabricmanager("nv-fabricmanager")
    assert found == {"binary": str(bindir / "nv-fabricmanager"), "version": "580.126.20",
                     "output": "Fabric Manager version is : 580.126.20"}  # fmt: skip
    assert probe.fabricmanager("no-such-fabricmanager")["version"] is None


def test_the_probe_reports_fabric_manager_and_fabric(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _executable(bindir / "nv-fabricmanager", "#!/bin/sh\necho 'Fabric Manager version is : 580.126.20'\n")
    _executable(bindir / "nvidia-smi", f"#!/bin/sh\ncase \"$1\" in -q) cat {tmp_path}/q.txt ;;"
                " *) echo 580.126.20 ;; esac\n")  # fmt: skip
    (tmp_path / "q.txt").write_text(SMI_Q)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        [sys.executable, str(ROOT / "roles/preflight/files/nvidia_stack_probe.py"), "--driver-package",
         "nvidia-driver-580-open", "--fabricmanager-binary", "nv-fabricmanager", "--fabric-state",
         "--module-version-file", str(tmp_path / "no-module")],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    report = json.loads(out)
    assert (report["driver"], report["driver_source"]) == ("580.126.20", "nvidia-smi")
    assert report["fabricmanager"]["version"] == report["driver"]
    assert [g["ok"] for g in report["fabric"]["gpus"]] == [True, False]


def test_check_only_mode_finds_the_branch_packages_and_their_drift(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    rows = [
        ("nvidia-compute-utils-580", "580.126.20-0ubuntu1", "installed", "install"),
        ("libnvidia-compute-580", "580.159.03-0ubuntu1", "installed", "hold"),
        ("nvidia-fabricmanager", "580.126.20-1", "installed", "install"),
        ("libnvidia-nscq", "580.126.20-1", "installed", "install"),
        ("nvlsm", "2025.06.6-1", "installed", "install"),
        ("nvidia-utils-575", "575.57.08-0ubuntu1", "config-files", "deinstall"),
        ("bash", "5.2.21-2ubuntu4", "installed", "install"),
    ]
    listing = "\\n".join("\\t".join(r) for r in rows)
    _executable(bindir / "dpkg-query", f"#!/bin/sh\nprintf '{listing}\\n'\n")
    module = tmp_path / "version"
    module.write_text("580.126.20\n")
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    globs = ["nvidia-*-580*", "libnvidia-*-580*", "nvidia-fabricmanager", "libnvidia-nscq", "nvlsm"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "roles/nvidia_driver/files/driver_packages.py"),
         *[a for g in globs for a in ("--glob", g)], "--exclude", "nvlsm", "--module-version-file", str(module)],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    report = json.loads(out)
    names = [p["name"] for p in report["packages"]]
    assert names == ["libnvidia-compute-580", "libnvidia-nscq", "nvidia-compute-utils-580", "nvidia-fabricmanager",
                     "nvlsm"]  # fmt: skip
    assert [p["name"] for p in report["drift"]] == ["libnvidia-compute-580"]
    assert {p["name"]: p["selection"] for p in report["packages"]}["libnvidia-compute-580"] == "hold"


def test_the_r580_package_names_are_pinned_and_held() -> None:
    defaults = (ROOT / "roles/nvidia_driver/defaults/main.yml").read_text()
    assert "nvidia_driver_fabricmanager_package: nvidia-fabricmanager\n" in defaults
    assert "nvidia_driver_nscq_package: libnvidia-nscq\n" in defaults
    assert "'nvidia-fabricmanager': nvidia_driver_version ~ '-*'" in defaults
    nvswitch = (ROOT / "roles/preflight/tasks/nvswitch.yml").read_text()
    assert "--fabricmanager-binary" in nvswitch and "--fabric-state" in nvswitch
    assert "fabricmanager_package" not in nvswitch  # never a package name for fabric manager's version


def test_b300s_check_only_inputs_pass_without_an_nvlsm_version(run_playbook, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """inventory/b300 (NVSwitch, NVLSM, check only) sets no nvlsm version: nothing is installed, nothing needs a
    pin. Installing still needs one for every package it installs."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.include_role:\n"
        "        name: ddtree.sglang.nvidia_driver\n        tasks_from: preflight\n"
    )
    b300 = ["-e", json.dumps({"nvidia_driver_nvswitch": True, "nvidia_driver_nvlsm": True})]
    ok = run_playbook("-i", "localhost,", "-c", "local", str(play), *b300)
    assert ok.returncode == 0, ok.stdout[-2000:]
    installing = run_playbook("-i", "localhost,", "-c", "local", str(play), *b300, "-e",
                              json.dumps({"nvidia_driver_install": True}))  # fmt: skip
    assert installing.returncode != 0 and "not pinned: nvlsm" in " ".join(installing.stdout.split())
