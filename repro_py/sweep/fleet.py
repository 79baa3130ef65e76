"""``python -m repro_py.sweep INVENTORY`` when the selection (``--limit-hosts GROUP``, or the whole inventory) holds
several hosts: a fleet sweep (:mod:`repro_py.sweep.fleetrun`).

Before any restart, every host is read by ``playbooks/host_class.yml`` (one play over all of them): a host that is
unreachable, or has the patch series missing or other than this bundle's, is left out, named with the reason;
the usable hosts are grouped into hardware classes (GPU model and count, driver, toolkit, sglang, series), and
each class measures the grid on its own hosts and is reported, and ranked, on its own. Every host of a class must
have the same grid, default config and benchmark settings (refused otherwise, naming the hosts), and a fleet
needs ``sweep_default_config``: each host measures it first (its offset) and is restored to it at the end.
Then each host's lease is taken (a host leased to another run is left out, named with the holder).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py import manifest
from repro_py.atomicio import write_json_atomic
from repro_py.codeeval.sandbox import IsolationUnavailable
from repro_py.exitcodes import ExitCode
from repro_py.report.fleet import build_fleet_report
from repro_py.sweep import lossless_restart, state
from repro_py.sweep.cmdline import RUN_ID_RE, bench_plan, parse_extra_vars, run_sampling, stored_plan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.fleethosts import FleetHost, open_hosts, read_classes
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT
from repro_py.sweep.fleetrun import REFUSED, ClassRun, FleetOptions, FleetOutcome, FleetRunner
from repro_py.sweep.grid import grid_from_target, load_grid_file
from repro_py.sweep.inventory import Target, source_args
from repro_py.sweep.measure import BundleMeasure, coding_sandbox
from repro_py.sweep.messages import print_plan, print_resume, refuse_unisolated
from repro_py.sweep.plan import Plan, make_plan

FLEET_FILE = "fleet.json"
#: what every host of one class must agree on (the plan is the class's)
_SHARED_VARS = ("sweep_grid", "sweep_default_config", "sweep_bench", "sweep_drafter_block_size")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host-offset-limit", type=float, default=DEFAULT_LIMIT, metavar="FRACTION",
        help=f"several hosts: a host whose reference figures differ from its class median by more than this "
        f"is flagged and measures nothing (default {DEFAULT_LIMIT})",
    )  # fmt: skip


def _class_plan(
    args: argparse.Namespace, members: Sequence[Target], stored: dict[str, Any] | None
) -> Plan:
    first = members[0]
    for other in members[1:]:
        differ = [v for v in _SHARED_VARS if first.var(v) != other.var(v)]
        if differ:
            raise PlanError([f"{first.host} and {other.host} are of one class but differ in {', '.join(differ)}; "
                             "a class measures one grid (make them equal, or sweep them apart with --limit-hosts)"])
    if args.grid is not None:
        raws = load_grid_file(args.grid)
        source = str(args.grid)
    elif stored is not None:
        raws = [dict(item["config"]) for item in stored.get("configs", [])]
        source = f"{stored.get('grid_source')} (resumed)".replace(" (resumed) (resumed)", " (resumed)")
    else:
        raws, source = grid_from_target(first), f"{args.inventory}: sweep_grid"
    plan = make_plan(
        first, raws, grid_source=source, bench=bench_plan(args, stored, first), results_root=args.results,
        sampling=run_sampling(args, stored),
        lossless_mode=lossless_restart.resume_mode(args.lossless_restart, stored, run=args.run_id or "?"),
    )  # fmt: skip
    if plan.default_config is None:
        raise PlanError([f"{first.host}: a sweep over several hosts needs sweep_default_config (each host measures "
                         "it first, for its offset from its class, and is restored to it at the end)"])
    return plan


def _plans(
    args: argparse.Namespace, targets: Sequence[Target], usable: Mapping[str, tuple[str, Mapping[str, Any]]],
    run: Path,
) -> dict[str, tuple[Plan, list[Target]]]:  # fmt: skip
    by_class: dict[str, list[Target]] = {}
    for target in targets:
        if target.host in usable:
            by_class.setdefault(usable[target.host][0], []).append(target)
    out: dict[str, tuple[Plan, list[Target]]] = {}
    for key, members in sorted(by_class.items()):
        stored = stored_plan(state.RunDir(run / key)) if args.resume else None
        out[key] = (_class_plan(args, members, stored), members)
    return out


def _resume_line(console: Console, what: str, args: argparse.Namespace, run_id: str, target: Target) -> None:
    options = [*(["--limit-hosts", args.limit_hosts] if args.limit_hosts else []),
               *(["--reconfigurer", "local"] if args.reconfigurer == "local" else [])]  # fmt: skip
    print_resume(console, what, str(args.inventory), run_id, results=args.results, sources=source_args(target),
                 options=options)  # fmt: skip


def _report(run: Path, console: Console) -> None:
    """Each class's report and the fleet page (hosts, offsets, restores, events), then the run's manifest."""
    paths = build_fleet_report(run)
    for name, path in sorted(paths.items()):
        if name.endswith("summary_md"):
            console.print(f"report ({name.split('/')[0]}): {path}", highlight=False)
    console.print(f"fleet page: {paths['fleet_md']}", highlight=False)
    manifest.write(run)
    console.print(f"manifest: {run / manifest.MANIFEST_NAME}")


@dataclasses.dataclass
class _Fleet:
    """What the run was given and found before any restart."""

    args: argparse.Namespace
    bundle: Path
    run: Path
    usable: Mapping[str, tuple[str, Mapping[str, Any]]]
    refused: dict[str, str]
    extra_vars: Mapping[str, object]

    def hosts(self, members: Sequence[Target]) -> list[FleetHost]:
        leased = open_hosts(
            self.bundle, members, self.usable, local=self.args.reconfigurer == "local", extra_vars=self.extra_vars,
            run_id=self.run.name, takeover=self.args.take_over_lease,
        )  # fmt: skip
        self.refused.update(leased.refused)
        return leased.hosts


def run_fleet(
    args: argparse.Namespace, targets: Sequence[Target], *, bundle: Path, console: Console, out: Console
) -> int:
    """The fleet sweep of ``targets`` (several hosts); the exit code as the one-host sweep's."""
    try:
        extra_vars = parse_extra_vars(args.extra_var)
        if args.reconfigurer == "local" and not all(t.simulated for t in targets):
            raise PlanError(["--reconfigurer local runs the simulated engine; these inventory hosts are real: "
                             + ", ".join(t.host for t in targets if not t.simulated)])  # fmt: skip
        if args.run_id is not None and not RUN_ID_RE.match(args.run_id):
            raise PlanError([f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only"])
        if args.resume and not args.run_id:
            raise PlanError(["--resume over several hosts: pass --run-id (the fleet run to continue)"])
        if not 0 < args.host_offset_limit < 1:
            raise PlanError([f"--host-offset-limit {args.host_offset_limit}: a fraction in (0, 1) expected"])
        run_id = args.run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-fleet")
        run = Path(args.results) / run_id
        if args.resume and not (run / FLEET_FILE).is_file():
            raise PlanError([f"--resume: {run} has no {FLEET_FILE} (not a fleet run, or none of that name)"])
        if not args.resume and run.exists():
            raise PlanError([f"{run} exists; pass --resume to continue it or another --run-id"])
        usable, refused = read_classes(bundle, targets, local=args.reconfigurer == "local", extra_vars=extra_vars)
        for why in refused.values():
            console.print(f"[yellow]left out: {why}[/]", markup=True, highlight=False)
        if not usable:
            raise PlanError(["no usable host: " + "; ".join(refused.values())])
        plans = _plans(args, targets, usable, run)
    except PlanError as exc:
        console.print("[red]the plan was refused; nothing was restarted:[/]")
        for problem in exc.problems:
            console.print(f"  - {problem}", markup=False, highlight=False)
        return ExitCode.USAGE
    for key, (plan, members) in plans.items():
        out.print(f"class {key}: {len(members)} host(s): {', '.join(t.host for t in members)}", highlight=False)
        print_plan(out, plan, f"{run_id}/{key}")
    if args.dry_run:
        return ExitCode.OK
    try:
        sandbox = coding_sandbox(allow_unisolated=args.allow_unisolated)
    except IsolationUnavailable as exc:
        return refuse_unisolated(console, exc)
    return _execute(_Fleet(args, bundle, run, usable, refused, extra_vars), plans, sandbox, console)


def _execute(
    fleet: _Fleet, plans: Mapping[str, tuple[Plan, list[Target]]], sandbox: Mapping[str, Any], console: Console
) -> int:
    args, run, extra_vars, usable, refused = fleet.args, fleet.run, fleet.extra_vars, fleet.usable, fleet.refused
    classes: list[ClassRun] = []
    for key, (plan, members) in plans.items():
        hosts = fleet.hosts(members)
        if not hosts:
            console.print(f"[yellow]class {key}: no host left to measure it (see above)[/]")
            continue
        cls_dir = state.RunDir(run / key)
        cls_dir.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cls_dir.plan, {**plan.as_dict(f"{run.name}/{key}"), "extra_vars": dict(extra_vars),
                                         "reconfigurer": args.reconfigurer, "sandbox": dict(sandbox),
                                         "hosts": [h.name for h in hosts]})  # fmt: skip
        measure = BundleMeasure(gates_kwargs={"allow_unisolated": args.allow_unisolated},
                                sampled_reference=cls_dir.sampled_reference)  # fmt: skip
        classes.append(ClassRun(key, usable[hosts[0].name][1], plan, cls_dir, measure, hosts))
    if not classes:
        console.print("[red]no host could be leased; nothing was restarted[/]")
        return ExitCode.LEASED
    record = _record(args, run, classes, refused)
    runner = FleetRunner(run, classes, bundle=fleet.bundle, record=record, console=console, options=FleetOptions(
        restore=not args.no_restore, retry_failed=args.retry_failed, offset_limit=args.host_offset_limit))
    outcome = asyncio.run(runner.run())
    return _conclude(args, run, classes, outcome, console)


def _record(args: argparse.Namespace, run: Path, classes: Sequence[ClassRun], refused: Mapping[str, str]) -> dict[
    str, Any
]:
    path = run / FLEET_FILE
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    first = classes[0].plan
    default = first.default_config
    record.update({
        "schema": 1, "run_id": run.name, "simulated": first.simulated, "inventory": str(args.inventory),
        "offset_limit": args.host_offset_limit,
        "reference": None if default is None else {"label": default.label, "config": default.short()},
    })  # fmt: skip
    record.setdefault("classes", {}).update({
        c.key: {"info": dict(c.info), "dir": c.key, "hosts": [h.name for h in c.hosts]} for c in classes
    })  # fmt: skip
    hosts = record.setdefault("hosts", {})
    for host, why in refused.items():
        hosts[host] = {"class": None, "status": REFUSED, "cause": why, "offset": None, "configs": [],
                       "restore": None, "endpoint": None}  # fmt: skip
    return record


def _conclude(
    args: argparse.Namespace, run: Path, classes: Sequence[ClassRun], outcome: FleetOutcome, console: Console
) -> int:
    target = classes[0].plan.target
    console.print(
        f"fleet {run.name}: {len(outcome.ran)} ran, {len(outcome.skipped)} already done, {len(outcome.failed)} "
        f"failed, {len(outcome.stranded)} left with no host, {outcome.wall_s:.1f} s"
    )
    for label, reason in outcome.failed.items():
        console.print(f"  FAILED {label}: {reason}", markup=False, highlight=False)
    for label in outcome.stranded:
        console.print(f"  NOT MEASURED {label}: no host of its class was left", markup=False, highlight=False)
    for host, why in outcome.not_restored().items():
        console.print(f"[red]  {host}: its default config was not restored: {why}[/]", highlight=False)
    if outcome.interrupted:
        _resume_line(console, f"interrupted; results so far in {run}", args, run.name, target)
        return ExitCode.INTERRUPTED
    if not args.no_report:
        _report(run, console)
    if outcome.stranded:
        _resume_line(console, "configs are left unmeasured", args, run.name, target)
    return ExitCode.FAILURE if outcome.not_restored() or outcome.stranded else ExitCode.OK
