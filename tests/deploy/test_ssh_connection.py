"""The test host is reached the way a GPU host is: SSH as an unprivileged user, become
root through sudo, pipelining and a persistent control connection."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, wants_testhost

HOSTVARS = yaml.safe_load((ROOT / "inventory/local/host_vars/sglang-testhost/main.yml").read_text())


def test_inventory_local_uses_ssh_with_sudo_pipelining_and_control_persist():
    assert HOSTVARS["ansible_connection"] == "ssh"
    assert HOSTVARS["ansible_user"] not in ("root", None)
    assert "ControlPersist=" in HOSTVARS["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in HOSTVARS["ansible_ssh_common_args"]
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.getboolean("ssh_connection", "pipelining")
    assert cfg.get("privilege_escalation", "become_method") == "sudo"
    assert not cfg.getboolean("ssh_connection", "usetty")  # a script's stderr stays out of its JSON stdout
    instance = ROOT / "molecule/default/host_vars/sglang-molecule"  # its files in the order Ansible loads them
    molecule = {k: v for f in sorted(instance.glob("*.yml")) for k, v in yaml.safe_load(f.read_text()).items()}
    assert molecule["ansible_connection"] == "ssh" and molecule["ansible_user"] == HOSTVARS["ansible_user"]
    # molecule writes its own ansible.cfg: the same SSH settings must be there
    options = yaml.safe_load((ROOT / "molecule/default/molecule.yml").read_text())["provisioner"]["config_options"]
    assert options["ssh_connection"] == {"pipelining": True, "usetty": False}
    assert options["privilege_escalation"]["become_method"] == "sudo"


def test_the_bare_host_checks_reach_their_host_as_inventory_local_does():
    """tests/install/run-host-checks.sh converges its bare host over SSH as deploy with sudo, not through
    ``podman exec`` (which cost each task about three times the CPU time, in podman and conmon); its port is
    the one the script gives testhost/up.sh."""
    hosts = yaml.safe_load((ROOT / "tests/install/hostchecks/hosts.yml").read_text())
    host = hosts["all"]["children"]["sglang_servers"]["hosts"]["sglang-hostchecks"]
    same = ("ansible_connection", "ansible_host", "ansible_user", "ansible_ssh_private_key_file",
            "ansible_ssh_common_args", "ansible_python_interpreter")  # fmt: skip
    assert {k: host.get(k) for k in same} == {k: HOSTVARS[k] for k in same}
    script = (ROOT / "tests/install/run-host-checks.sh").read_text()
    assert 'export HOSTCHECKS_SSH_PORT="${HOSTCHECKS_SSH_PORT:-31053}"' in script
    assert 'TESTHOST_SSH_PORT="$HOSTCHECKS_SSH_PORT" timed boot testhost/up.sh' in script
    assert "HOSTCHECKS_SSH_PORT" in host["ansible_port"] and "31053" in host["ansible_port"]


@pytest.mark.testhost
@pytest.mark.skipif(not wants_testhost(), reason="set SGLANG_TESTHOST=1 (the deployed test host)")
def test_the_test_host_answers_over_ssh_and_becomes_root_through_sudo():
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}  # fmt: skip
    ansible = str(Path(sys.executable).parent / "ansible")
    res = subprocess.run(
        [ansible, "-i", "inventory/local", "sglang-testhost", "-b", "-m", "ansible.builtin.command",
         "-a", "id -un", "-e", "ansible_python_interpreter=/usr/bin/python3"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    result = out["plays"][0]["tasks"][0]["hosts"]["sglang-testhost"]
    assert result["stdout"] == "root"
    # the same without become: the connection's own user, not root
    res = subprocess.run(
        [ansible, "-i", "inventory/local", "sglang-testhost", "-m", "ansible.builtin.command", "-a", "id -un"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"]["sglang-testhost"]["stdout"] == "deploy"
