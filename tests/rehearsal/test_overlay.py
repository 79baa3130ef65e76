"""The rehearsal's overlay stays thin: it changes only what must differ on the test host.

tests/rehearsal/<inventory>/ is layered on the shipped inventory (``-i inventory/ct200 -i tests/rehearsal/ct200``).
Every key it sets is on the list below, with the reason it must differ there; a key that is not fails this test,
and so does a file that is not one of the overlay's three. The shipped inventory itself is used as it is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "rehearsal"

#: key -> why it differs on the test host
ALLOWED = {
    # connection: the test host's address in its own network namespace, the key and host key testhost/up.sh made
    "ansible_host": "connection",
    "ansible_ssh_private_key_file": "connection",
    "ansible_ssh_common_args": "connection",
    # engine: the simulated one (its venv has no torch to check)
    "sglang_service_engine": "engine simulated",
    "preflight_torch_check": "engine simulated",
    "sglang_service_sim_load_seconds": "engine simulated",
    "sglang_service_sim_warmup_seconds": "engine simulated",
    # disk: the test host's /opt is this machine's shared disk, with stand-in weights of a few KiB
    "preflight_disk_checks": "disk",
    # GPU stand-ins: device nodes with no driver behind them
    "sglang_service_device_check": "GPU stand-ins",
    # install sources and paths: the offline wheelhouse, the test host's lock and wheels
    "cuda_toolkit_wheel_python": "paths",
    "cuda_toolkit_wheelhouse": "paths",
    "python_env_python": "paths",
    "python_env_requirements": "paths",
    "python_env_wheelhouse": "paths",
    "python_env_local_wheels": "paths",
    # the site's secrets, in Ansible Vault as README.md says (vault.yml)
    "vault_sglang_service_api_key": "vault",
    "sglang_service_admin_api_key": "vault",
}
FILES = {"hosts.yml", "group_vars/all/rehearsal.yml", "group_vars/all/vault.yml"}


def _host_var_keys(doc: Any) -> set[str]:
    keys: set[str] = set()
    if isinstance(doc, dict):
        for name, body in doc.items():
            if name in ("hosts",) and isinstance(body, dict):
                for host_vars in body.values():
                    keys |= set(host_vars or {})
            elif name == "vars" and isinstance(body, dict):
                keys |= set(body)
            else:
                keys |= _host_var_keys(body)
    return keys


def overlay_keys(base: Path) -> set[str]:
    keys = _host_var_keys(yaml.safe_load((base / "hosts.yml").read_text()))
    keys |= set(yaml.safe_load((base / "group_vars" / "all" / "rehearsal.yml").read_text()))
    vault = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "view", "--vault-password-file",
         str(HERE / "vault-password"), str(base / "group_vars" / "all" / "vault.yml")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return keys | set(yaml.safe_load(vault))


def problems(base: Path) -> list[str]:
    """What makes the overlay at ``base`` more than a thin one (empty: nothing)."""
    out = [f"{base} sets {key}, which is not on its list" for key in sorted(overlay_keys(base) - set(ALLOWED))]
    files = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}
    out += [f"{base} holds {name}, not one of the overlay's three files" for name in sorted(files - FILES)]
    return out


@pytest.mark.parametrize("inventory", ["ct200", "b300"])
def test_the_overlay_sets_only_allowed_keys(inventory: str) -> None:
    assert problems(HERE / inventory) == []
    keys = overlay_keys(HERE / inventory)
    assert "vault_sglang_service_api_key" in keys and "sglang_service_admin_api_key" in keys
    assert (HERE / inventory / "group_vars" / "all" / "vault.yml").read_text().startswith("$ANSIBLE_VAULT;")


@pytest.mark.parametrize("inventory", ["ct200", "b300"])
def test_the_overlay_keeps_the_shipped_bind_port_and_key_reference(inventory: str) -> None:
    """What the rehearsal is about stays the shipped inventory's: the 0.0.0.0 bind, port 30001, the vault reference."""
    shipped = yaml.safe_load((ROOT / "inventory" / inventory / "group_vars" / "all" / "service.yml").read_text())
    assert shipped["sglang_service_host"] == "0.0.0.0" and shipped["sglang_service_port"] == 30001
    assert shipped["sglang_service_api_key"] == "{{ vault_sglang_service_api_key | default('') }}"
    assert not {"sglang_service_host", "sglang_service_port", "sglang_service_api_key"} & overlay_keys(HERE / inventory)


def test_a_grown_overlay_is_named(tmp_path: Path) -> None:
    """The check bites: a key off the list, in a variables file or on the host, and an extra file are named."""
    grown = tmp_path / "ct200"
    shutil.copytree(HERE / "ct200", grown)
    with (grown / "group_vars" / "all" / "rehearsal.yml").open("a") as fh:
        fh.write("sglang_service_port: 31999\n")
    hosts = yaml.safe_load((grown / "hosts.yml").read_text())
    hosts["all"]["children"]["sglang_servers"]["hosts"]["ct200.example.internal"]["sglang_service_host"] = "127.0.0.1"
    (grown / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (grown / "group_vars" / "all" / "more.yml").write_text("sglang_service_tp_size: 1\n")
    assert problems(grown) == [
        f"{grown} sets sglang_service_host, which is not on its list",
        f"{grown} sets sglang_service_port, which is not on its list",
        f"{grown} holds group_vars/all/more.yml, not one of the overlay's three files",
    ]


@pytest.mark.parametrize("inventory", ["ct200", "b300"])
def test_the_test_host_is_asked_for_the_space_it_uses_not_for_the_production_weights(inventory: str) -> None:
    """The rehearsal's free-space check is the shipped one (same paths), sized as inventory/local sizes the same host.

    The shipped 30 GiB at /opt is for real weights; the test host's /opt is this machine's disk, shared with the
    controller and the other test hosts, and a clean clone's run leaves less of it free as it goes (a run failed
    b300's preflight with "/opt has 28.5 GiB free; at least 30 GiB is required").
    """
    layered = yaml.safe_load((HERE / inventory / "group_vars" / "all" / "rehearsal.yml").read_text())
    shipped = yaml.safe_load((ROOT / "inventory" / inventory / "group_vars" / "all" / "preflight.yml").read_text())
    local = yaml.safe_load((ROOT / "inventory" / "local" / "group_vars" / "all" / "preflight.yml").read_text())
    checks = layered.get("preflight_disk_checks", shipped["preflight_disk_checks"])
    assert [c["path"] for c in checks] == [c["path"] for c in shipped["preflight_disk_checks"]]
    most_local = max(c["min_free_gb"] for c in local["preflight_disk_checks"])
    assert max(c["min_free_gb"] for c in checks) <= most_local, checks
