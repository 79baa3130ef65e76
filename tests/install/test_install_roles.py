"""The install roles without a host: apt templates rendered, cross-variable asserts, the drift probe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from install_helpers import ROOT

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
FREEZE_DIFF = ROOT / "roles" / "python_env" / "files" / "freeze_diff.py"

needs_ansible = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not installed")


def playbook(tmp_path: Path, text: str, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "play.yml"
    path.write_text(textwrap.dedent(text))
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(path), *extra],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )


RENDER = """\
- name: Render the cuda_toolkit apt templates
  hosts: localhost
  gather_facts: false
  vars:
    out: "{out}"
    templates: "{templates}"
  tasks:
    - name: Load the role's defaults and internal vars
      ansible.builtin.include_vars:
        file: "{{{{ item }}}}"
      loop: ["{roles}/cuda_toolkit/defaults/main.yml", "{roles}/cuda_toolkit/vars/main.yml"]
    - name: Render
      ansible.builtin.template:
        src: "{{{{ templates }}}}/{{{{ item.src }}}}"
        dest: "{{{{ out }}}}/{{{{ item.dest }}}}"
        mode: "0644"
      loop:
        - {{src: etc/apt/sources.list.d/cuda-toolkit.sources.j2, dest: cuda-toolkit.sources}}
        - {{src: etc/apt/preferences.d/nvidia-pins.j2, dest: preferences}}
      vars:
        cuda_toolkit_apt_pin_set: "{{{{ cuda_toolkit_apt_pins }}}}"
"""


@needs_ansible
@pytest.mark.parametrize("mirror", ["", "http://mirror.example.internal/cuda/ubuntu2404/x86_64/"])
def test_apt_source_and_pins_render(tmp_path: Path, mirror: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    text = RENDER.format(out=out, templates=ROOT / "roles/cuda_toolkit/templates", roles=ROOT / "roles")
    proc = playbook(tmp_path, text, "-e", json.dumps({"cuda_toolkit_apt_mirror_url": mirror}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    source = (out / "cuda-toolkit.sources").read_text()
    assert source.startswith("# Ansible managed")
    fields = dict(line.split(": ", 1) for line in source.splitlines() if ": " in line and not line.startswith("#"))
    assert fields["Types"] == "deb"
    assert fields["URIs"] == (mirror or "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/")
    assert fields["Suites"] == "/"
    assert fields["Signed-By"] == "/usr/share/keyrings/cuda-archive-keyring.gpg"
    prefs = (out / "preferences").read_text()
    stanzas = [s for s in prefs.split("\n\n") if "Package:" in s]
    pins = {}
    for stanza in stanzas:
        kv = dict(line.split(": ", 1) for line in stanza.strip().splitlines() if not line.startswith("#"))
        assert kv["Pin-Priority"] == "1001"
        pins[kv["Package"]] = kv["Pin"]
    assert pins["cuda-toolkit-13-0"] == "version 13.0.3-1"
    assert pins["cuda-nvcc-13-0"] == "version 13.0.88-1"
    assert pins["cuda-cudart-13-0"] == "version 13.0.96-1"
    assert pins["cuda-cccl-13-0"] == "version 13.0.85-1"
    assert pins["libcurand-dev-13-0"] == "version 10.4.0.35-1"  # curand_kernel.h for FlashInfer's sampling JIT
    assert pins["cuda-driver-dev-13-0"] == "version 13.0.96-1"  # lib64/stubs/libcuda.so for -lcuda
    assert all(v.startswith(("version 13.0.", "version 10.4.0.35-")) for v in pins.values())


ASSERT_APT = """\
- name: Preflight of method apt without a keyring checksum
  hosts: localhost
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Preflight
      ansible.builtin.include_role:
        name: ddtree.sglang.cuda_toolkit
        tasks_from: preflight
      vars:
        cuda_toolkit_method: apt
"""


@needs_ansible
def test_apt_preflight_requires_keyring_checksum(tmp_path: Path) -> None:
    proc = playbook(tmp_path, ASSERT_APT)
    assert proc.returncode != 0
    assert "cuda_toolkit_apt_keyring_sha256 set to the sha256 of cuda-keyring_1.1-1_all.deb" in proc.stdout
    assert "(found '')" in proc.stdout


@needs_ansible
def test_wheel_preflight_rejects_release_mismatch(tmp_path: Path) -> None:
    wheel = "cuda_toolkit_method: wheel\n        cuda_toolkit_nvcc_release: V13.5.1"
    proc = playbook(tmp_path, ASSERT_APT.replace("cuda_toolkit_method: apt", wheel))
    assert proc.returncode != 0
    assert "cuda_toolkit_nvcc_release 'V13.5.1' must be V<major.minor" in " ".join(proc.stdout.split())


def test_freeze_diff_reports_drift(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for name, version in [("aiohttp", "3.14.5"), ("PyYAML", "6.0.1"), ("stray_pkg", "1.0")]:
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lock = tmp_path / "req.lock"
    lock.write_text(
        "aiohttp==3.14.5 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via x\n"
        "pyyaml==6.0.4 \\\n    --hash=sha256:" + "b" * 64 + "\n"
        "idna==3.20 \\\n    --hash=sha256:" + "c" * 64 + "\n"
    )

    def run(*wheels: str) -> dict[str, object]:
        args = [str(py), str(FREEZE_DIFF), "--lock", str(lock)]
        for w in wheels:
            args += ["--wheel", w]
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        result: dict[str, object] = json.loads(out)
        return result

    drift = run()
    assert drift["ok"] is False
    assert drift["missing"] == ["idna==3.20"]
    assert drift["extra"] == ["stray-pkg==1.0"]
    assert drift["mismatched"] == ["pyyaml: locked 6.0.4, installed 6.0.1"]
    assert "-pyyaml==6.0.4" in str(drift["diff"]) and "+pyyaml==6.0.1" in str(drift["diff"])

    # Matching environment: lock + a local wheel (name normalised like pip).
    (site / "PyYAML-6.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: PyYAML\nVersion: 6.0.4\n")
    dist = site / "idna-3.20.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: idna\nVersion: 3.20\n")
    ok = run("stray_pkg==1.0")
    assert ok["ok"] is True, ok
