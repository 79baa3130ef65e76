"""The hosts of a fleet sweep: each with its own target, reconfigurer, lease and hardware class.

``ansible``: one :class:`~repro_py.sweep.reconfigure.AnsibleReconfigurer` per host, limited to it (production's
``playbooks/reconfigure.yml``, run side by side through ansible-runner), and one host lease per host, taken side
by side before the first restart. A host whose lease is held by another run is left out of the run, named with
its holder; the run is refused only when no host is left. After a failed config the host's lease is checked
again (:meth:`~repro_py.sweep.lease.HostLease.check`): an unreachable host or a lost lease is an infrastructure
cause, not the config's. ``local``: the simulated engine as a local process per host (development aid and
benchmark), no lease.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from repro_py.sweep import hostclass
from repro_py.sweep.errors import PlanError
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target
from repro_py.sweep.lease import HostLease, LeaseRefused, ansible_play_runner
from repro_py.sweep.localproc import local_reconfigurer
from repro_py.sweep.reconfigure import AnsibleReconfigurer, ReconfigureOutcome, Reconfigurer

#: the class of hosts measured with ``--reconfigurer local`` (no host is read: each is a local simulated engine)
LOCAL_CLASS = "local-simulated"


class OneAtATime:
    """A host's reconfigurer that runs one restart at a time: after Ctrl-C the restore of the host's default waits
    until the play that was cancelled on it has ended (a cancelled play stops at its next task, not at once)."""

    def __init__(self, inner: Reconfigurer) -> None:
        self.inner: Reconfigurer = inner.inner if isinstance(inner, OneAtATime) else inner
        self.lock = threading.Lock()

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:  # fmt: skip
        with self.lock:
            return self.inner.reconfigure(cfg, private_dir, cancel, restore=restore, deterministic=deterministic)

    def journal(
        self, private_dir: Path, lines: int = 40, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        return self.inner.journal(private_dir, lines=lines, invocation_id=invocation_id, grep=grep)

    def close(self) -> None:
        with self.lock:
            self.inner.close()


def _healthy() -> str | None:
    return None


def _nothing_held() -> str:
    return "no host lease to give back"


@dataclasses.dataclass
class FleetHost:
    """One host of the run: what it restarts and measures with, its class, and how to check and release it."""

    name: str
    target: Target
    reconfigurer: Reconfigurer
    class_key: str
    class_info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: None while the host can still work for the run; else why not (blocking, run in a thread)
    check: Callable[[], str | None] = _healthy
    release: Callable[[], str] = _nothing_held

    def close(self) -> None:
        self.reconfigurer.close()


@dataclasses.dataclass(frozen=True)
class Leased:
    hosts: list[FleetHost]
    #: host -> why it was left out (its lease held by another run, ...)
    refused: dict[str, str]


def _take(lease: HostLease) -> tuple[str | None, str]:
    try:
        return None, lease.acquire()
    except LeaseRefused as exc:
        return str(exc), ""


def ansible_fleet(
    bundle: Path,
    targets: Sequence[Target],
    classes: Mapping[str, tuple[str, Mapping[str, Any]]],
    *,
    extra_vars: Mapping[str, object],
    run_id: str,
    takeover: bool,
) -> Leased:
    """A reconfigurer and a lease per host (``classes``: host -> (class key, class info)), the leases taken side by
    side; the hosts whose lease was refused are named in :attr:`Leased.refused`, with the holder."""
    pairs: list[tuple[Target, AnsibleReconfigurer, HostLease]] = []
    for target in targets:
        reconfigurer = AnsibleReconfigurer(bundle, target, limit=target.host, extra_vars=dict(extra_vars))
        lease = HostLease(
            ansible_play_runner(reconfigurer.run_play, reconfigurer.bundle), f"{run_id}-{target.host}",
            takeover=takeover,
        )  # fmt: skip
        pairs.append((target, reconfigurer, lease))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(pairs))) as pool:
        taken = list(pool.map(lambda p: _take(p[2]), pairs))
    hosts: list[FleetHost] = []
    refused: dict[str, str] = {}
    for (target, reconfigurer, lease), (why, _said) in zip(pairs, taken, strict=True):
        if why is not None:
            refused[target.host] = why
            continue
        reconfigurer.lease_vars = lease.extravars()
        key, info = classes[target.host]
        hosts.append(FleetHost(target.host, target, reconfigurer, key, info, check=lease.check, release=lease.release))
    return Leased(hosts, refused)


def local_fleet(targets: Sequence[Target], classes: Mapping[str, tuple[str, Mapping[str, Any]]]) -> list[FleetHost]:
    """``--reconfigurer local``: a simulated engine on a free loopback port per host; no lease."""
    hosts: list[FleetHost] = []
    for target in targets:
        local_target, reconfigurer = local_reconfigurer(target)
        key, info = classes[target.host]
        hosts.append(FleetHost(target.host, local_target, reconfigurer, key, info))
    return hosts


def read_classes(
    bundle: Path, targets: Sequence[Target], *, local: bool, extra_vars: Mapping[str, object]
) -> tuple[dict[str, tuple[str, Mapping[str, Any]]], dict[str, str]]:
    """host -> (class key, class info) for the usable hosts, read by ``playbooks/host_class.yml`` in one play over
    all of them (``local``: one class of local simulated engines, nothing read); host -> why not, for the others
    (unreachable, the patch series missing or another)."""
    if local:
        return {t.host: (LOCAL_CLASS, {"engine": "simulated, local processes"}) for t in targets}, {}
    with tempfile.TemporaryDirectory(prefix="host-class-") as private:  # nothing of a run's before its plan
        probes = hostclass.probe_hosts(
            bundle, targets[0].inventories, [t.host for t in targets], access=targets[0].access,
            private_dir=Path(private), extra_vars=extra_vars,
        )  # fmt: skip
    usable: dict[str, tuple[str, Mapping[str, Any]]] = {}
    refused: dict[str, str] = {}
    for host, probe in probes.items():
        if probe.usable and probe.host_class is not None:
            usable[host] = (probe.host_class.key(), probe.host_class.as_dict())
        else:
            refused[host] = str(probe.problem or f"{host}: its hardware class could not be read")
    return usable, refused


def class_of(bundle: Path, target: Target, *, local: bool, extra_vars: Mapping[str, object]) -> dict[str, Any]:
    """One host's hardware class (``key`` and what was read), as a run records it in its plan and every result;
    :class:`~repro_py.sweep.errors.PlanError` naming why when it cannot be read (unreachable, the series missing
    or not this bundle's)."""
    usable, refused = read_classes(bundle, [target], local=local, extra_vars=extra_vars)
    if target.host not in usable:
        raise PlanError([refused.get(target.host) or f"{target.host}: its hardware class could not be read"])
    key, info = usable[target.host]
    return {"key": key, **info}


def open_hosts(
    bundle: Path, members: Sequence[Target], classes: Mapping[str, tuple[str, Mapping[str, Any]]], *, local: bool,
    extra_vars: Mapping[str, object], run_id: str, takeover: bool,
) -> Leased:  # fmt: skip
    """The hosts of one run, ready to restart: ``local`` simulated engines, else a reconfigurer and a lease per
    host (a host whose lease is refused is named, with why, in :attr:`Leased.refused`)."""
    if local:
        return Leased(local_fleet(members, classes), {})
    leased = ansible_fleet(bundle, members, classes, extra_vars=extra_vars, run_id=run_id, takeover=takeover)
    return Leased(leased.hosts, {h: f"{h}: {why}" for h, why in leased.refused.items()})
