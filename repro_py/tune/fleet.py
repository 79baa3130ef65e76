"""``python -m repro_py.tune INVENTORY`` when the selection (``--limit-hosts GROUP``, or the whole inventory) holds
several hosts: the tuner measures on them side by side (:mod:`repro_py.tune.fleetloop`).

Before any restart every host is read by ``playbooks/host_class.yml`` (one play over all of them, as for a fleet
sweep): a host that is unreachable, or whose patch series is missing or other than this bundle's, is left out,
named with the reason. The hosts left must be of one hardware class (GPU model and count, driver, toolkit,
sglang, series): a tuner ranks configs within one class, so hosts of two classes are refused, each class named
with its hosts, before anything restarts. Then each host's lease is taken (a host leased to another run is left
out, named with the holder).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.sweep.fleethosts import FleetHost, open_hosts, read_classes
from repro_py.tune.sweepio import PlanError, Target


@dataclasses.dataclass
class FleetSelection:
    """The hosts a tuning run over several hosts measures on: one class, the others left out with why."""

    members: list[Target]
    class_key: str
    class_info: Mapping[str, Any]
    classes: Mapping[str, tuple[str, Mapping[str, Any]]]
    refused: dict[str, str]

    def names(self) -> list[str]:
        return [t.host for t in self.members]


def select(
    bundle: Path, targets: Sequence[Target], *, local: bool, extra_vars: Mapping[str, object], console: Console
) -> FleetSelection:
    """The usable hosts of ``targets``, of one class; :class:`PlanError` when none is, or when they are of several."""
    usable, refused = read_classes(bundle, targets, local=local, extra_vars=extra_vars)
    for why in refused.values():
        console.print(f"[yellow]left out: {why}[/]", markup=True, highlight=False)
    if not usable:
        raise PlanError(["no usable host: " + "; ".join(refused.values())])
    by_class: dict[str, list[str]] = {}
    for host, (key, _info) in usable.items():
        by_class.setdefault(key, []).append(host)
    if len(by_class) > 1:
        named = "; ".join(f"class {key}: {', '.join(sorted(hosts))}" for key, hosts in sorted(by_class.items()))
        raise PlanError([f"the hosts are of {len(by_class)} hardware classes ({named}); a tuning run ranks configs "
                         "within one class: tune each apart with --limit-hosts"])  # fmt: skip
    ((key, _),) = by_class.items()
    members = [t for t in targets if t.host in usable]
    return FleetSelection(members, key, usable[members[0].host][1], usable, refused)


def open_selection(
    bundle: Path, selection: FleetSelection, *, local: bool, extra_vars: Mapping[str, object], run_id: str,
    takeover: bool, console: Console,
) -> list[FleetHost]:  # fmt: skip
    """Each host ready to restart (its lease taken, side by side); a host whose lease is refused is left out."""
    leased = open_hosts(bundle, selection.members, selection.classes, local=local, extra_vars=extra_vars,
                        run_id=run_id, takeover=takeover)  # fmt: skip
    for why in leased.refused.values():
        console.print(f"[yellow]left out: {why}[/]", markup=True, highlight=False)
    selection.refused.update(leased.refused)
    return leased.hosts
