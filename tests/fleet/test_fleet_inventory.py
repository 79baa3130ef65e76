"""tests/fleet/inventory is inventory/local for two hosts: its values exactly, but for what must differ per host.

The inventory's group_vars/ is inventory/local's (a link); hosts.yml sets, per host, only the connection, the
service port (the hosts share this machine's network) and the controller paths inventory/local writes relative to
its own directory, which must still name the same files. Read through ansible-inventory, as the plays see it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "tests" / "fleet" / "inventory"
HOSTS = {"sglang-fleet-1": 31031, "sglang-fleet-2": 31032}
#: key -> why it may differ from inventory/local's sglang-testhost
PER_HOST = {"ansible_port": "connection: the host's own sshd", "sglang_service_port": "one shared network"}
#: written relative to {{ inventory_dir }}: equal once that is resolved
PATHS = ("cuda_toolkit_wheelhouse", "python_env_requirements", "python_env_wheelhouse")


def hostvars(inventory: Path) -> dict[str, dict[str, Any]]:
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory), "--list"],
        cwd=ROOT, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return dict(json.loads(out.stdout)["_meta"]["hostvars"])


def resolved_path(value: str, inventory: Path) -> str:
    return os.path.normpath(value.replace("{{ inventory_dir }}", str(inventory)))


@pytest.fixture(scope="module")
def both() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    return hostvars(ROOT / "inventory" / "local")["sglang-testhost"], hostvars(FLEET)


def test_the_fleet_hosts_have_inventory_locals_values_but_connection_port_and_paths(
    both: tuple[dict[str, Any], dict[str, dict[str, Any]]],
) -> None:
    local, fleet = both
    assert sorted(fleet) == sorted(HOSTS)
    for host, values in fleet.items():
        assert set(values) == set(local), host
        differ = sorted(k for k in values if values[k] != local[k] and k not in PATHS)
        assert differ == sorted(PER_HOST), f"{host} differs from inventory/local in {differ}"
        for key in PATHS:
            assert resolved_path(values[key], FLEET) == resolved_path(local[key], ROOT / "inventory" / "local"), key


def test_each_host_has_its_own_sshd_and_server_port(both: tuple[dict[str, Any], dict[str, dict[str, Any]]]) -> None:
    local, fleet = both
    assert {h: v["ansible_port"] for h, v in fleet.items()} == HOSTS
    ports = {v["sglang_service_port"] for v in fleet.values()}
    assert len(ports) == len(HOSTS) and local["sglang_service_port"] not in ports
    assert ports.isdisjoint(HOSTS.values()) and local["ansible_port"] not in ports


def test_the_paths_name_files_that_exist_here() -> None:
    assert (ROOT / "requirements" / "testhost.lock").is_file()
    assert (FLEET / "group_vars").resolve() == (ROOT / "inventory" / "local" / "group_vars").resolve()
