"""REPRODUCE.md's commands, checked without containers: every block says where it runs (so that
test_reproduce.py runs it), and the defects an operator met running it as written stay fixed. The step-3
commands (inventory copy and keys) run here for real, in a scratch directory, with the bundle's ansible-vault.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.rehearsal.test_reproduce import DOC, blocks, commands

ROOT = Path(__file__).resolve().parents[2]


def _all() -> list[tuple[str, str]]:
    return [(machine, cmd) for machine, block in blocks(DOC.read_text()) for cmd in commands(block)]


def test_every_command_block_names_its_machine_and_splits_into_commands() -> None:
    text = DOC.read_text()
    found = blocks(text)  # an untagged ```sh block fails here
    assert len(found) == text.count("\n```sh ")
    for _, block in found:
        kept = [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        assert "\n".join(kept) == "\n".join(c for cmd in commands(block) for c in cmd.splitlines())


def test_the_host_installs_no_python_package_with_pip() -> None:
    """A stock Ubuntu 24.04 has no pip, and PEP 668 refuses system-wide installs: pipx (or a venv) it is."""
    host = [cmd for machine, cmd in _all() if machine == "host"]
    assert not [c for c in host if re.match(r"(sudo )?pip3? install", c)], host
    assert any(c.startswith("pipx install") for c in host)


def test_every_keyed_request_sends_the_key_and_no_key_is_typed() -> None:
    """The server binds 0.0.0.0 with a key: every request to it authenticates; no key is on a command line."""
    cmds = [cmd for _, cmd in _all()]
    for cmd in cmds:
        if "curl" in cmd and ":30001" in cmd:
            assert "-H @" in cmd or "Authorization" in cmd, cmd
        assert "--api-key" not in cmd, cmd
        if "encrypt_string" in cmd:
            assert "--stdin-name" in cmd and "<" in cmd, cmd  # the value from a file, not the command line


def test_every_play_and_tool_after_the_vault_gets_a_vault_password() -> None:
    cmds = [cmd for machine, cmd in _all() if machine == "controller"]
    vault_at = next(i for i, c in enumerate(cmds) if "encrypt_string" in c)
    exported = any(c.startswith("export ANSIBLE_VAULT_PASSWORD_FILE=") for c in cmds[:vault_at])
    for cmd in cmds[vault_at:]:
        if cmd.startswith(("ansible-playbook", "python -m repro_py")):
            assert exported or "--vault-password-file" in cmd or "--vault-id" in cmd or "-J" in cmd.split(), cmd


def test_the_doc_says_the_host_needs_password_less_sudo() -> None:
    text = " ".join(DOC.read_text().split())
    assert "password-less sudo" in text and "NOPASSWD:ALL" in text and "--ask-become-pass" in text


def test_step_3_leaves_one_api_key_and_a_vault_the_tools_resolve(tmp_path: Path) -> None:
    """The inventory and key commands as written (the editor steps left out): vault.yml holds the keys,
    service.yml keeps its single sglang_service_api_key, and Ansible resolves it to the key."""
    work = tmp_path / "bundle"
    (work / "inventory").mkdir(parents=True)
    shutil.copytree(ROOT / "inventory" / "ct200", work / "inventory" / "ct200")
    home = tmp_path / "home"
    home.mkdir()
    step3 = [c for m, c in _all() if m == "controller" and "EDITOR" not in c]
    start = next(i for i, c in enumerate(step3) if c.startswith("cp -r inventory/ct200"))
    end = next(i for i, c in enumerate(step3) if c.startswith("scripts/build-wheelhouse.sh"))
    script = "set -euo pipefail\n" + "\n".join(step3[start:end])
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", script], cwd=work, env=env, check=True, capture_output=True, text=True)
    service = (work / "inventory" / "mysite" / "group_vars" / "all" / "service.yml").read_text()
    assert service.count("\nsglang_service_api_key:") == 1
    vault = (work / "inventory" / "mysite" / "group_vars" / "all" / "vault.yml").read_text()
    assert yaml.safe_load(vault.replace("!vault", "")).keys() == {"vault_sglang_service_api_key",
                                                                   "sglang_service_admin_api_key"}  # fmt: skip
    key = (home / ".sglang-api-key").read_text()
    assert len(key) == 48 and "\n" not in key and oct((home / ".sglang-api-key").stat().st_mode)[-3:] == "600"
    assert (home / ".sglang-auth-header").read_text() == f"Authorization: Bearer {key}\n"
    from repro_py.ansibleaccess import AnsibleAccess  # noqa: PLC0415
    from repro_py.sweep.inventory import load_target  # noqa: PLC0415

    target = load_target(work / "inventory" / "mysite",
                         access=AnsibleAccess(vault_password_files=(str(home / ".vault-pass"),)))  # fmt: skip
    assert target.endpoint.api_key == key
    assert target.endpoint.admin_api_key == (home / ".sglang-admin-key").read_text()
