"""Where a host's server is and how to authenticate to it, from the inventory's resolved values.

Shared by the sweep and the tuner (their target) and by ``python -m repro_py.gates``
and ``python -m repro_py.bench`` with ``--inventory`` (:func:`add_arguments`,
:func:`endpoint_from_args`): the URL, the served model name and both keys come
from the inventory as its plays see them (:mod:`repro_py.inventory_values`),
so no key needs to be typed on a command line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro_py import ansibleaccess
from repro_py.ansibleaccess import AccessError
from repro_py.endpoint import Endpoint
from repro_py.inventory_values import InventoryError, resolve


def _key(values: Mapping[str, Any], name: str) -> str | None:
    value = values.get(name)
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} resolves to a {type(value).__name__}, not a string (a key is one word)")
    return value


def endpoint_of(host: str, hostvars: Mapping[str, Any]) -> Endpoint:
    explicit = hostvars.get("sweep_endpoint_url")
    api_key = _key(hostvars, "sglang_service_api_key")
    admin_key = _key(hostvars, "sglang_service_admin_api_key")
    model = str(hostvars.get("sglang_service_served_model_name") or "default")
    if isinstance(explicit, str) and explicit.strip():
        return Endpoint(explicit, api_key=api_key, model=model, admin_api_key=admin_key)
    port = hostvars.get("sglang_service_port", 30001)
    address = endpoint_address(host, hostvars)
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return Endpoint(f"http://{address}:{port}", api_key=api_key, model=model, admin_api_key=admin_key)


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--model``, the keys from the environment, and ``-i/--inventory`` with the vault options."""
    parser.add_argument("--url", default=None, help="server base URL (default: from --inventory)")
    parser.add_argument(
        "-i", "--inventory", action="append", type=Path, default=[], metavar="INVENTORY",
        help="take the URL, the served model name and the API keys from this Ansible inventory, as its plays "
        "resolve them (vault included; repeatable to layer sources, as ansible-playbook -i A -i B)",
    )  # fmt: skip
    parser.add_argument("--limit-hosts", metavar="HOST", help="the inventory host when it has several")
    parser.add_argument(
        "--api-key", default=None,
        help="bearer key; visible to every user in the process list: prefer $SGLANG_API_KEY or --inventory",
    )  # fmt: skip
    parser.add_argument("--model", default=None, help="model name in requests (default: the inventory's, else default)")
    ansibleaccess.add_arguments(parser)


def endpoint_from_args(args: argparse.Namespace) -> Endpoint:
    """The endpoint of a gates/bench command line: ``--url``/``--model``/``--api-key`` (else $SGLANG_API_KEY,
    $SGLANG_ADMIN_API_KEY) over the inventory's values. Refused: ValueError naming the problem."""
    values: Mapping[str, Any] = {}
    host = ""
    if args.inventory:
        access = ansibleaccess.from_args(args)
        try:
            access.check()
            access = access.with_answers() if access.prompts() else access
            hosts = resolve(args.inventory, limit=args.limit_hosts, access=access)
        except (AccessError, InventoryError) as exc:
            raise ValueError(str(exc)) from exc
        if len(hosts) != 1:
            where = " + ".join(map(str, args.inventory))
            raise ValueError(f"{where} has {len(hosts)} hosts matching ({', '.join(sorted(hosts)) or 'none'}): "
                             "pass --limit-hosts HOST")
        host, resolved = next(iter(hosts.items()))
        values = resolved.values
    elif not args.url:
        raise ValueError("--url or --inventory is required")
    from_inventory = endpoint_of(host, values) if args.inventory else None
    url = args.url or (from_inventory.base_url if from_inventory else "")
    model = args.model or (from_inventory.model if from_inventory else "default")
    api_key = args.api_key or os.environ.get("SGLANG_API_KEY") or (from_inventory.api_key if from_inventory else None)
    admin = os.environ.get("SGLANG_ADMIN_API_KEY") or (from_inventory.admin_api_key if from_inventory else None)
    return Endpoint(url, api_key=api_key or None, model=model, admin_api_key=admin or None)
