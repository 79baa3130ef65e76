"""The one host a sweep measures, resolved from the inventory as its plays see it: values, engine kind, endpoint.

The values come from :mod:`repro_py.inventory_values` (Ansible itself templates
and decrypts them, vault included); the inventory may be layered
(``INVENTORY -i LAYER ...``, as ``ansible-playbook -i A -i B``), and the vault
and become options (:mod:`repro_py.ansibleaccess`) travel with the target to
every play the tool runs.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repro_py import ansibleaccess
from repro_py.ansibleaccess import AccessError, AnsibleAccess
from repro_py.endpoint import Endpoint
from repro_py.inventory_endpoint import endpoint_of
from repro_py.inventory_values import HostValues, InventoryError, resolve
from repro_py.sweep.errors import PlanError


@dataclasses.dataclass(frozen=True)
class Target:
    """The one host a sweep reconfigures and measures."""

    inventory: Path
    host: str
    #: the resolved values the tools read, the API keys left out (they live in ``endpoint`` only)
    hostvars: Mapping[str, Any]
    endpoint: Endpoint
    engine_kind: str  # "simulated" | "real"
    #: further inventory sources layered after ``inventory`` (``-i``), in order
    layers: tuple[Path, ...] = ()
    #: vault and become options for every play
    access: AnsibleAccess = dataclasses.field(default_factory=AnsibleAccess)

    @property
    def simulated(self) -> bool:
        return self.engine_kind == "simulated"

    @property
    def inventories(self) -> tuple[Path, ...]:
        return (self.inventory, *self.layers)

    def var(self, name: str, default: Any = None) -> Any:
        return self.hostvars.get(name, default)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-i LAYER`` (repeatable) and ansible-playbook's vault and become options."""
    parser.add_argument(
        "-i", "--inventory", dest="layers", action="append", type=Path, default=[], metavar="INVENTORY",
        help="a further inventory source layered after INVENTORY (repeatable; as ansible-playbook -i A -i B)",
    )  # fmt: skip
    ansibleaccess.add_arguments(parser)


def access_from_args(args: argparse.Namespace) -> AnsibleAccess:
    """The vault and become options, every prompt answered once now; refused (:class:`PlanError`) when a
    password file is missing."""
    access = ansibleaccess.from_args(args)
    try:
        access.check()
    except AccessError as exc:
        raise PlanError([str(exc)]) from exc
    return access.with_answers() if access.prompts() else access


def engine_kind_of(hostvars: Mapping[str, Any]) -> str:
    """``simulated`` or ``real`` from the inventory (``sglang_service_engine``, the role's default ``sglang``)."""
    value = str(hostvars.get("sglang_service_engine") or "sglang").strip().lower()
    return "simulated" if value == "simulated" else "real"


def _limited(hosts: Mapping[str, Any], limit: str | None) -> dict[str, HostValues]:
    wanted = {h.strip() for h in (limit or "").split(",") if h.strip()}
    return {
        h: v if isinstance(v, HostValues) else HostValues(h, dict(v))
        for h, v in hosts.items()
        if not wanted or h in wanted
    }


def load_targets(
    inventory: Path,
    *,
    limit: str | None = None,
    layers: Sequence[Path] = (),
    access: AnsibleAccess | None = None,
    extra_vars: Mapping[str, object] | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> list[Target]:
    """Every host of ``inventory`` (plus ``layers``) that ``limit`` selects (a host, a group or a pattern, as
    Ansible reads it), sorted by name, its values resolved by Ansible (``resolved``: host -> values instead, for
    tests). Refused: :class:`PlanError` naming the problem (no such source, no host selected, an endpoint)."""
    access = access or AnsibleAccess()
    sources = (inventory, *layers)
    for source in sources:
        if not source.exists():
            raise PlanError([f"inventory {source} does not exist"])
    if resolved is None:
        try:
            hosts = resolve(sources, limit=limit or None, access=access, extra_vars=extra_vars)
        except InventoryError as exc:
            raise PlanError(exc.problems) from exc
    else:
        hosts = _limited(resolved, limit)
    where = " + ".join(map(str, sources))
    if not hosts:
        raise PlanError([f"no host in {where}" + (f" matching --limit-hosts {limit}" if limit else "")])
    targets: list[Target] = []
    problems: list[str] = []
    for host, values in sorted(hosts.items()):
        try:
            endpoint = endpoint_of(host, values.values)
        except ValueError as exc:
            problems.append(f"endpoint of {host}: {exc}")
            continue
        targets.append(Target(
            inventory=inventory, host=host, hostvars=values.public(), endpoint=endpoint,
            engine_kind=engine_kind_of(values.values), layers=tuple(layers), access=access,
        ))  # fmt: skip
    if problems:
        raise PlanError(problems)
    return targets


def load_target(
    inventory: Path,
    *,
    limit: str | None = None,
    layers: Sequence[Path] = (),
    access: AnsibleAccess | None = None,
    extra_vars: Mapping[str, object] | None = None,
    resolved: Mapping[str, Any] | None = None,
) -> Target:
    """The single host of ``inventory`` (plus ``layers``), or the one ``limit`` names (:func:`load_targets`);
    refused (:class:`PlanError`) when the selection holds several hosts."""
    targets = load_targets(
        inventory, limit=limit, layers=layers, access=access, extra_vars=extra_vars, resolved=resolved
    )
    if len(targets) > 1:
        where = " + ".join(map(str, (inventory, *layers)))
        names = ", ".join(t.host for t in targets)
        raise PlanError([f"{where} has {len(targets)} hosts ({names}); a sweep measures one: pass --limit-hosts HOST"])
    return targets[0]


def target_from_args(
    args: argparse.Namespace, extra_vars: Mapping[str, object] | None = None, *, limit: str | None = None
) -> Target:
    """The target of a tool's command line (``inventory``, ``layers``, ``limit_hosts`` unless ``limit`` is given,
    the vault options)."""
    return load_target(
        args.inventory, limit=limit or args.limit_hosts, layers=args.layers, access=access_from_args(args),
        extra_vars=extra_vars,
    )  # fmt: skip


def source_args(target: Target) -> list[str]:
    """The command-line arguments after INVENTORY that select the same sources and options again (``-i``
    layers, vault and become options; never a password)."""
    out: list[str] = []
    for layer in target.layers:
        out += ["-i", str(layer)]
    return out + target.access.args()


def reload_target(target: Target) -> Target:
    """``target`` resolved again (after a change to its inventory), from the same sources with the same options."""
    return load_target(target.inventory, limit=target.host, layers=target.layers, access=target.access)
