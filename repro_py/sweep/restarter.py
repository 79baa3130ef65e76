"""The reconfigurer a run restarts the engine with, and the host lease it holds meanwhile (the sweep's and the
tuner's runs start here).

``ansible``: ``playbooks/reconfigure.yml`` through ansible-runner, under the host lease
(:mod:`repro_py.sweep.lease`), which the whole run holds, the final restore included. ``local``: the simulated
engine as a local process on a free loopback port (:mod:`repro_py.sweep.localproc`): no host, so no lease, and
the plan's target then points at that port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from repro_py.exitcodes import ExitCode
from repro_py.sweep.lease import HostLease
from repro_py.sweep.lease import take as take_lease
from repro_py.sweep.localproc import local_reconfigurer
from repro_py.sweep.plan import Plan
from repro_py.sweep.reconfigure import AnsibleReconfigurer, Reconfigurer


def open_reconfigurer(
    kind: str,
    plan: Plan,
    *,
    bundle: Path,
    limit: str | None,
    extra_vars: Mapping[str, object],
    run_id: str,
    takeover: bool,
    console: Console,
    command: Sequence[str],
) -> tuple[Plan, Reconfigurer, HostLease | None] | ExitCode:
    """The plan the run restarts (the local one's target is its own port), the reconfigurer and the host lease
    taken for it; an exit code, already explained on ``console``, when there is none to be had: no playbook
    (usage), or the host leased to another run (``command`` is the run's own, printed with the take-over flag)."""
    if kind == "local":
        local_target, local = local_reconfigurer(plan.target)
        return dataclasses.replace(plan, target=local_target), local, None
    reconfigurer = AnsibleReconfigurer(bundle, plan.target, limit=limit, extra_vars=dict(extra_vars))
    if not reconfigurer.available():
        console.print(f"[red]{reconfigurer.playbook} does not exist[/]")
        return ExitCode.USAGE
    lease = take_lease(reconfigurer, run_id, takeover=takeover, console=console, command=list(command))
    if lease is None:
        return ExitCode.LEASED
    return plan, reconfigurer, lease
