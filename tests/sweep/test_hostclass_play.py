"""playbooks/host_class.yml through probe_hosts, on this machine (no podman): local-connection hosts whose GPUs,
nvcc and sglang are stand-ins, each with its own series state file, and one host nothing answers for.

Proves the play's side of the contract: one run over every host, one unreachable host not stopping the others,
the series compared with the same digest as the controller's (ok, missing, differing, unreadable), the play
read-only and the same under --check.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from repro_py.ansibleaccess import AnsibleAccess
from repro_py.sweep import hostclass

pytest.importorskip("ansible_runner")

BUNDLE = Path(__file__).resolve().parents[2]
SERIES = BUNDLE / "patches" / "sglang" / "0.5.23"
GPU = "NVIDIA RTX PRO 6000 Blackwell Server Edition (stand-in)"


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _state(patches: list[dict[str, str]]) -> str:
    """The role's state file as install.yml leaves it (the keys the play reads, and the role's digest)."""
    files = hostclass.hostcode.load("sglang_patch_files")
    return json.dumps({"schema": 1, "package": "sglang", "version": "0.5.23", "files": {},
                       "patches": [{**p, "files": []} for p in patches],
                       "series_sha256": files.series_sha256(patches)})  # fmt: skip


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Six local hosts (series ok, missing, differing, unreadable; stock sglang and an empty series; no nvcc and
    no venv) and one unreachable; stand-in tools on PATH."""
    state_json = tmp_path / "gpus.json"
    state_json.write_text(json.dumps({
        "driver_version": "580.95.05",
        "gpus": [{"index": i, "uuid": f"GPU-{i}", "name": GPU, "memory_total": 97887} for i in range(8)],
    }))  # fmt: skip
    shutil.copy(BUNDLE / "testhost" / "fake-gpu" / "nvidia-smi", tmp_path / "nvidia-smi.py")
    _script(tmp_path / "bin" / "nvidia-smi", f'#!/bin/sh\nexec {sys.executable} {tmp_path}/nvidia-smi.py "$@"\n')
    _script(tmp_path / "cuda" / "bin" / "nvcc",
            "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            "echo 'Cuda compilation tools, release 13.0, V13.0.88'\necho 'Build cuda_13.0.r13.0/compiler.36424714_0'\n")
    dist = tmp_path / "site" / "sglang-0.5.23.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    _script(tmp_path / "venv" / "bin" / "python", f'#!/bin/sh\nPYTHONPATH={tmp_path}/site exec {sys.executable} "$@"\n')
    files = hostclass.hostcode.load("sglang_patch_files")
    names = hostclass.series_names(SERIES / "series")
    patches = [{"name": n, "sha256": files.sha256_bytes((SERIES / n).read_bytes())} for n in names]
    (tmp_path / "ok.json").write_text(_state(patches))
    (tmp_path / "differs.json").write_text(_state([*patches[:-1], {**patches[-1], "sha256": "0" * 64}]))
    (tmp_path / "corrupt.json").write_text("{not json")
    (tmp_path / "stock").mkdir()
    (tmp_path / "stock" / "series").write_text("# empty: plain DFLASH on stock sglang\n")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False,
             "cuda_toolkit_home": str(tmp_path / "cuda"), "preflight_venv_path": str(tmp_path / "venv")}  # fmt: skip
    port = _free_port()
    hosts = {
        "fleet-ok": {**local, "sglang_patches_state_file": str(tmp_path / "ok.json")},
        "fleet-missing": {**local, "sglang_patches_state_file": str(tmp_path / "absent.json")},
        "fleet-differs": {**local, "sglang_patches_state_file": str(tmp_path / "differs.json")},
        "fleet-corrupt": {**local, "sglang_patches_state_file": str(tmp_path / "corrupt.json")},
        "fleet-stock": {**local, "sglang_patches_state_file": str(tmp_path / "absent.json"),
                        "sglang_patches_series_dir": str(tmp_path / "stock")},
        "fleet-nocuda": {**local, "sglang_patches_state_file": str(tmp_path / "ok.json"),
                         "cuda_toolkit_home": "/nonexistent", "preflight_venv_path": "/nonexistent"},
        "fleet-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": port,
                       "ansible_user": "nobody", "ansible_become": False,
                       "ansible_ssh_common_args": "-o BatchMode=yes -o StrictHostKeyChecking=no "
                                                  "-o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"},
    }  # fmt: skip
    inventory = tmp_path / "inventory" / "hosts.yml"
    inventory.parent.mkdir()
    inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_servers": {"hosts": hosts}}}}))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_NVIDIA_STATE", str(state_json))
    return {"inventory": inventory, "hosts": list(hosts), "port": port, "tmp": tmp_path,
            "state_files": {h: v.get("sglang_patches_state_file") for h, v in hosts.items()}}  # fmt: skip


def test_one_run_reads_every_host_and_flags_each_that_cannot_be_compared(fleet: dict[str, Any]) -> None:
    tmp: Path = fleet["tmp"]
    before = {p: p.read_bytes() for p in tmp.glob("*.json")}
    probes = hostclass.probe_hosts(BUNDLE, [fleet["inventory"]], fleet["hosts"], access=AnsibleAccess(),
                                   private_dir=tmp / "runner")  # fmt: skip
    assert list(probes) == fleet["hosts"]
    ok = probes["fleet-ok"]
    assert ok.problem is None, ok
    assert ok.host_class == hostclass.HostClass(GPU, 8, "580.95.05", "13.0", "0.5.23", hostclass.series_digest(SERIES))
    assert probes["fleet-missing"].problem == (
        f"fleet-missing: patch series not applied (state file {fleet['state_files']['fleet-missing']} missing)"
    )
    differs = probes["fleet-differs"]
    assert differs.host_class is not None and differs.problem is not None
    assert differs.problem == (
        f"fleet-differs: patch series {differs.host_class.series} differs from this bundle's "
        f"{hostclass.series_digest(SERIES)} (run site.yml)"
    )
    corrupt = probes["fleet-corrupt"].problem or ""
    assert corrupt.startswith(f"fleet-corrupt: patch series unknown (state file {tmp / 'corrupt.json'} unreadable: "), \
        corrupt
    assert "Expecting property name" in corrupt and "disagree" not in corrupt
    stock = probes["fleet-stock"]
    assert stock.problem is None and stock.host_class == dataclasses.replace(ok.host_class, series="")
    nocuda = probes["fleet-nocuda"]
    assert nocuda.host_class is None and nocuda.problem is not None
    assert nocuda.problem.startswith("fleet-nocuda: /nonexistent/bin/nvcc --version failed (exit 127): "), nocuda
    assert "; sglang not read by /nonexistent/bin/python: " in nocuda.problem
    gone = probes["fleet-gone"]
    assert gone.host_class is None and gone.problem is not None
    assert gone.problem.startswith("fleet-gone: unreachable (") and f"port {fleet['port']}" in gone.problem
    assert hostclass.classes(probes) == {ok.host_class.key(): ["fleet-ok"], stock.host_class.key(): ["fleet-stock"]}
    assert {p: p.read_bytes() for p in tmp.glob("*.json")} == before  # read only


def test_the_play_gives_the_same_answer_under_check(fleet: dict[str, Any]) -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(BUNDLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(fleet["inventory"]), "--check",
         "--limit", "fleet-ok,fleet-differs", str(BUNDLE / "playbooks" / "host_class.yml"), "-v"],
        cwd=BUNDLE, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "changed=0" in out.stdout and "failed=0" in out.stdout
    assert out.stdout.count("series_status: ok") == 1 and out.stdout.count("series_status: differs") == 1
    assert f"gpu_model: {GPU}" in out.stdout
