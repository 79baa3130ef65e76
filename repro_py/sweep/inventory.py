"""The one host a sweep measures, read from the inventory: its variables, engine kind and endpoint."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro_py.endpoint import Endpoint
from repro_py.sweep.errors import PlanError


@dataclasses.dataclass(frozen=True)
class Target:
    """The one host a sweep reconfigures and measures."""

    inventory: Path
    host: str
    hostvars: Mapping[str, Any]
    endpoint: Endpoint
    engine_kind: str  # "simulated" | "real"

    @property
    def simulated(self) -> bool:
        return self.engine_kind == "simulated"

    def var(self, name: str, default: Any = None) -> Any:
        return self.hostvars.get(name, default)


def _tool(name: str) -> str:
    """An Ansible executable: next to this interpreter first, then PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise PlanError([f"{name} is not installed (expected next to {sys.executable} or on PATH)"])
    return found


def inventory_list(inventory: Path) -> dict[str, Any]:
    """``ansible-inventory --list`` as JSON (group vars merged into hostvars)."""
    env = dict(os.environ)
    env.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    proc = subprocess.run(
        [_tool("ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    if proc.returncode != 0:
        raise PlanError(
            [f"ansible-inventory -i {inventory} --list failed (rc={proc.returncode}): {proc.stderr.strip()}"]
        )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _hosts_of(data: Mapping[str, Any]) -> list[str]:
    hostvars: Mapping[str, Any] = data.get("_meta", {}).get("hostvars", {})
    hosts: set[str] = set(hostvars)
    for group, body in data.items():
        if group == "_meta" or not isinstance(body, Mapping):
            continue
        hosts.update(body.get("hosts", []) or [])
    return sorted(hosts)


def engine_kind_of(hostvars: Mapping[str, Any]) -> str:
    """``simulated`` or ``real`` from the inventory (``sglang_service_engine``)."""
    for key in ("sglang_service_engine", "sglang_engine_kind", "sglang_engine", "engine_kind"):
        value = hostvars.get(key)
        if isinstance(value, str) and value.strip():
            return "simulated" if value.strip().lower() in {"simulated", "sim", "simengine"} else "real"
    if hostvars.get("sglang_simulated") is True:
        return "simulated"
    return "real"


def endpoint_of(host: str, hostvars: Mapping[str, Any]) -> Endpoint:
    explicit = hostvars.get("sweep_endpoint_url")
    api_key = hostvars.get("sglang_service_api_key") or None
    model = str(hostvars.get("sglang_service_served_model_name") or "default")
    if isinstance(explicit, str) and explicit.strip():
        return Endpoint(explicit, api_key=api_key, model=model)
    port = hostvars.get("sglang_service_port", 30001)
    return Endpoint(f"http://{endpoint_address(host, hostvars)}:{port}", api_key=api_key, model=model)


_LOCAL_CONNECTIONS = ("local", "podman", "docker", "containers.podman.podman", "community.docker.docker")
_WILDCARD = ("", "0.0.0.0", "::", "[::]")


def endpoint_address(host: str, hostvars: Mapping[str, Any]) -> str:
    """Where the controller reaches the engine.

    ``sweep_endpoint_host`` when set; for a host on this machine (local, podman or
    docker connection; the test host shares the network) the service's own bind
    address (loopback unless it binds a specific address); otherwise a specific
    ``sglang_service_host``, then ``ansible_host``, then the inventory name.
    """
    explicit = hostvars.get("sweep_endpoint_host")
    if isinstance(explicit, str) and explicit:
        return explicit
    bind = str(hostvars.get("sglang_service_host") or "")
    if str(hostvars.get("ansible_connection") or "") in _LOCAL_CONNECTIONS:
        return "127.0.0.1" if bind in _WILDCARD else bind
    if bind not in _WILDCARD and bind not in ("127.0.0.1", "localhost", "::1"):
        return bind
    return str(hostvars.get("ansible_host") or host)


def load_target(inventory: Path, *, limit: str | None = None, data: Mapping[str, Any] | None = None) -> Target:
    """The single host of ``inventory`` (or the one ``limit`` names)."""
    if data is None:
        data = inventory_list(inventory)
    hosts = _hosts_of(data)
    if limit:
        wanted = {h.strip() for h in limit.split(",") if h.strip()}
        groups = {g for g in wanted if isinstance(data.get(g), Mapping)}
        selected = [h for h in hosts if h in wanted]
        for group in groups:
            selected.extend(data[group].get("hosts", []) or [])
        hosts = sorted(set(selected))
    if not hosts:
        raise PlanError([f"no host in {inventory}" + (f" matching --limit-hosts {limit}" if limit else "")])
    if len(hosts) > 1:
        raise PlanError(
            [f"{inventory} has {len(hosts)} hosts ({', '.join(hosts)}); a sweep measures one: pass --limit-hosts HOST"]
        )
    host = hosts[0]
    hostvars: Mapping[str, Any] = data.get("_meta", {}).get("hostvars", {}).get(host, {})
    try:
        endpoint = endpoint_of(host, hostvars)
    except ValueError as exc:
        raise PlanError([f"endpoint of {host}: {exc}"]) from exc
    return Target(
        inventory=inventory, host=host, hostvars=hostvars, endpoint=endpoint, engine_kind=engine_kind_of(hostvars)
    )
