"""A sweep's host lease: taken once before the first reconfigure, given back when the sweep ends.

The rules are the role's (``plugins/module_utils/sglang_lease.py``,
applied on the host by ``playbooks/lease.yml``): a second sweep or deploy on
the host is refused at once, naming the holder, since when and how to take the
lease over; a lease whose holder's controller process is gone (same controller,
same boot, PID dead) is taken over and the takeover reported; there is no timer.

The holder is this sweep's own process (PID and start time), so a sweep that
was killed leaves a lease the next run from the same controller takes over.
Every reconfigure play carries the lease id and holder
(``sglang_service_lease_id`` / ``sglang_service_lease_holder``): the sweep's
own plays run under its lease, and a play finds out if someone took it over.

``--reconfigurer local`` takes no lease: it starts its own simulated engine on
a free loopback port and touches no host.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import tempfile
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.sweep import hostcode
from repro_py.sweep.reconfigure import AnsibleReconfigurer, failed_task_messages, read_events

#: ``run_play(playbook name, private dir, extra vars)`` -> (runner status, rc, job events).
PlayRunner = Callable[[str, Path, Mapping[str, object]], tuple[str, int | None, list[dict[str, Any]]]]
TAKEOVER_FLAG = "--take-over-lease"
#: What sudo (through Ansible's become) says when it needs a password it was not given.
_SUDO_PASSWORD = ("missing sudo password", "a password is required", "incorrect sudo password")


class LeaseRefused(Exception):
    """The host is leased to another run (the message names it); nothing was changed."""


def holder(run_id: str) -> dict[str, object]:
    """This sweep process as the lease holder: kind, controller host and boot, PID and start time, user, command."""
    rules = hostcode.load("sglang_lease")
    return {"kind": f"sweep {run_id}", **rules.process_identity(os.getpid())}


def ansible_play_runner(run_play: Callable[..., Any], bundle: Path) -> PlayRunner:
    """A :data:`PlayRunner` over :meth:`AnsibleReconfigurer.run_play` (``playbooks/<name>``)."""

    def run(name: str, private_dir: Path, extravars: Mapping[str, object]) -> tuple[str, int | None, list[Any]]:
        result = run_play(bundle / "playbooks" / name, private_dir, extravars)
        return str(result.status), result.rc, read_events(Path(result.config.artifact_dir))

    return run


def _results(events: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    out = []
    for event in events:
        if event.get("event") == "runner_on_ok":
            res = (event.get("event_data") or {}).get("res")
            if isinstance(res, Mapping):
                out.append(res)
    return out


@dataclasses.dataclass
class HostLease:
    """Take (:meth:`acquire`) and give back (:meth:`release`) one sweep's lease through ``play``."""

    play: PlayRunner
    run_id: str
    takeover: bool = False
    lease_id: str = ""
    holder: dict[str, object] = dataclasses.field(default_factory=dict)
    held: bool = False

    def __post_init__(self) -> None:
        self.lease_id = self.lease_id or f"sweep-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.holder = self.holder or holder(self.run_id)

    def extravars(self) -> dict[str, object]:
        """What every play of the sweep carries."""
        return {"sglang_service_lease_id": self.lease_id, "sglang_service_lease_holder": self.holder}

    def _run(self, state: str, extra: Mapping[str, object]) -> tuple[str, int | None, list[dict[str, Any]]]:
        with tempfile.TemporaryDirectory(prefix=f"sweep-lease-{state}-") as private:
            extravars = {**self.extravars(), "sglang_service_lease_state": state, **extra}
            return self.play("lease.yml", Path(private), extravars)

    def acquire(self) -> str:
        """Take the lease; what happened (taken, or taken over from whom). Refused: :class:`LeaseRefused`."""
        status, rc, events = self._run("acquired", {"sglang_service_lease_takeover": self.takeover})
        if rc != 0:
            failures = failed_task_messages(events)
            why = failures[-1]["msg"] if failures else f"the lease play ended with status={status} rc={rc}"
            raise LeaseRefused(why)
        self.held = True
        took = [str(res.get("msg")) for res in _results(events) if res.get("took_over")]
        return "; ".join(took) if took else f"host lease {self.lease_id} taken for sweep {self.run_id}"

    def check(self) -> str | None:
        """None while this lease still holds the host; otherwise why not, an infrastructure cause: the host is
        unreachable, or another run holds its lease now (a fleet then takes the host out of the run)."""
        try:
            status, rc, events = self._run("acquired", {"sglang_service_lease_takeover": False})
        except Exception as exc:  # the play could not even run: say so, as the cause
            return f"the lease check could not run: {type(exc).__name__}: {exc}"
        if rc == 0:
            return None
        failures = failed_task_messages(events)
        unreachable = [f for f in failures if f["unreachable"]]
        if unreachable:
            return f"unreachable: {unreachable[-1]['msg']}"
        why = failures[-1]["msg"] if failures else f"the lease play ended with status={status} rc={rc}"
        return f"host lease lost: {why}"

    def release(self) -> str:
        """Give the lease back (if still ours); what happened. Never raises for a play that failed."""
        if not self.held:
            return "no host lease to give back"
        try:
            status, rc, events = self._run("released", {})
        except Exception as exc:  # the sweep's results are safe; say what to do with the lease
            return (
                f"giving back host lease {self.lease_id} failed ({exc}); a next run from this controller "
                "takes it over once this sweep has exited"
            )
        self.held = False
        said = [str(res.get("msg")) for res in _results(events) if "released" in res]
        if rc != 0 or not said:
            return f"giving back host lease {self.lease_id} ended with status={status} rc={rc}"
        return said[-1]


def take(
    reconfigurer: AnsibleReconfigurer, run_id: str, *, takeover: bool, console: Console, command: list[str]
) -> HostLease | None:
    """Take the lease for a run whose plays ``reconfigurer`` runs, and have every play carry it; refused: None,
    after printing who holds it and ``command`` with :data:`TAKEOVER_FLAG` (the way to take it over)."""
    lease = HostLease(ansible_play_runner(reconfigurer.run_play, reconfigurer.bundle), run_id, takeover=takeover)
    try:
        console.print(lease.acquire(), markup=False, highlight=False)
    except LeaseRefused as exc:
        if any(s in str(exc).lower() for s in _SUDO_PASSWORD):
            console.print("[red]the plays become root with sudo on the host and sudo wants a password; nothing was "
                          "restarted:[/]")  # fmt: skip
            console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
            console.print(
                "give the inventory's ansible_user password-less sudo on the host (/etc/sudoers.d/USER: "
                "'USER ALL=(ALL) NOPASSWD:ALL'), or add --ask-become-pass (asked once, given to every play)",
                markup=False, highlight=False, soft_wrap=True,
            )  # fmt: skip
            return None
        console.print("[red]refused; nothing was restarted:[/]")
        console.print(str(exc), markup=False, highlight=False, soft_wrap=True)
        console.print("[yellow]if that run is gone, take the lease over with:[/]")
        takeover_command = command if TAKEOVER_FLAG in command else [*command, TAKEOVER_FLAG]
        console.print(shlex.join(takeover_command), soft_wrap=True, markup=False, highlight=False)
        return None
    reconfigurer.lease_vars = lease.extravars()
    return lease
