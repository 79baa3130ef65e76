"""``python -m repro_py.sweep INVENTORY [options]``: plan, run, report and seal a sweep.

Exit codes (:class:`repro_py.exitcodes.ExitCode`): 0 the sweep ran to the end
(failed configs are results, listed with reasons in the report); 1 the sweep
ran but restoring the default config failed; 2 bad command line, an
invalid plan or an inventory value that cannot be resolved (nothing was
restarted); 3 the host is leased to another sweep or deploy, or the plays
cannot become root (sudo wants a password; nothing was restarted); 4 no
isolating sandbox for the coding gate and no ``--allow-unisolated`` (nothing
was restarted); 130 interrupted (resumable).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from repro_py import manifest
from repro_py.atomicio import write_json_atomic
from repro_py.codeeval.sandbox import IsolationUnavailable
from repro_py.exitcodes import ExitCode
from repro_py.report.render import build_report
from repro_py.sweep import extravars, fleet, lossless_restart, state
from repro_py.sweep import inventory as inventorymod
from repro_py.sweep.cmdline import RUN_ID_RE, bench_plan, default_run_id, parse_extra_vars, run_sampling, stored_plan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.fleethosts import class_of
from repro_py.sweep.grid import grid_from_target, load_grid_file
from repro_py.sweep.inventory import Target, access_from_args, load_targets, source_args, target_from_args
from repro_py.sweep.lease import TAKEOVER_FLAG
from repro_py.sweep.measure import BundleMeasure, coding_sandbox
from repro_py.sweep.messages import print_gates, print_plan, print_resume, refuse_unisolated
from repro_py.sweep.plan import Plan, make_plan
from repro_py.sweep.restarter import open_reconfigurer
from repro_py.sweep.runner import SweepOptions, SweepRunner

#: the repository (playbooks, roles, inventories) the plays run from
BUNDLE = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m repro_py.sweep",
        description="Sweep speculative-decoding configs on a host, or on several side by side: reconfigure, "
        "benchmark, gate, report.",
    )
    p.add_argument("inventory", type=Path, help="Ansible inventory (e.g. inventory/local)")
    inventorymod.add_arguments(p)
    p.add_argument("--grid", type=Path, help="YAML with configs: (a list) and/or grid: (a cartesian product)")
    p.add_argument("--run-id", help="name of the run directory (default: <UTC time>-<host>)")
    p.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results/)")
    p.add_argument("--resume", action="store_true", help="continue a run: skip configs whose fingerprint matches")
    p.add_argument("--retry-failed", action="store_true", help="with --resume, rerun configs that failed")
    p.add_argument("--dry-run", action="store_true", help="print the plan and its estimated duration; run nothing")
    p.add_argument(
        "--no-restore", action="store_true",
        help="leave the last restart running at the end (with --lossless-restart separate usually a lossless gate's, "
        "with deterministic inference)",
    )  # fmt: skip
    p.add_argument("--bench-contexts", nargs="+", metavar="N", help="context lengths (tokens), e.g. 60 1024 4096")
    p.add_argument("--bench-concurrency", nargs="+", metavar="N", help="concurrency levels, e.g. 1 8 32")
    p.add_argument("--repeats", type=int, help="repeats per cell (default 3)")
    p.add_argument("--max-tokens", type=int, help="max output tokens per request (default 512)")
    p.add_argument(
        "--temperature", type=float,
        help="sampling temperature of every benchmark request, >= 0, for grid entries that name none "
        "(default 0: greedy; see docs/sweep.md)",
    )  # fmt: skip
    p.add_argument(
        "--top-p", type=float, help="top_p of every benchmark request, in (0, 1], for grid entries that name none "
        "(default 1)",
    )  # fmt: skip
    p.add_argument(
        "--limit-hosts", metavar="PATTERN",
        help="the inventory host, group or pattern to sweep (default: every host; several hosts are swept side by "
        "side, each hardware class on its own: docs/sweep.md)",
    )  # fmt: skip
    fleet.add_arguments(p)
    lossless_restart.add_argument(p)
    p.add_argument(
        "--reconfigurer",
        choices=("ansible", "local"),
        default="ansible",
        help="ansible: playbooks/reconfigure.yml (default); local: simulated engine as a local process "
        "(simulated inventories only; development aid)",
    )
    p.add_argument(
        "-e",
        "--extra-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra var for every reconfigure play (YAML value), e.g. sglang_service_sim_speed=10; "
        "the config's own keys cannot be set this way",
    )
    p.add_argument("--no-report", action="store_true", help="skip summary/plots/manifest at the end")
    p.add_argument(
        "--allow-unisolated",
        action="store_true",
        help="judge the coding gate's candidates even when no isolating sandbox (bubblewrap, namespaces) works "
        "on this controller (mode none: the candidate reads the controller's files); the mode is in every result",
    )
    p.add_argument(
        TAKEOVER_FLAG,
        action="store_true",
        help="take the host lease over from the run that holds it (check that run is gone first); a holder "
        "whose process is gone on this controller is taken over without it",
    )
    return p


@dataclasses.dataclass
class PlannedRun:
    """A validated plan and what it came from: the target, the run directory of a resumed run, the extra vars."""

    plan: Plan
    target: Target
    run_dir: state.RunDir | None
    extra_vars: dict[str, object]


def _resumed(args: argparse.Namespace, target: Target) -> tuple[state.RunDir, dict[str, Any]]:
    """``--resume``: the run directory (``--run-id``, else the latest unfinished run) and its stored plan."""
    results_root: Path = args.results
    if args.run_id:
        run_dir = state.RunDir(results_root / args.run_id)
    else:
        found = state.latest_resumable(results_root)
        if found is None:
            raise PlanError([f"--resume: no unfinished run under {results_root}; pass --run-id"])
        run_dir = state.RunDir(found)
    stored = stored_plan(run_dir)
    if stored is None:
        raise PlanError([f"--resume: {run_dir.plan} is missing or unreadable"])
    if stored.get("host") not in (None, target.host):
        raise PlanError([f"--resume: run {run_dir.run_id} swept host {stored.get('host')}, not {target.host}"])
    return run_dir, stored


def _grid(args: argparse.Namespace, target: Target, stored: dict[str, Any] | None) -> tuple[list[Any], str]:
    """The configs to run and where they come from: ``--grid``, else the resumed plan's, else the inventory's."""
    if args.grid is not None:
        return load_grid_file(args.grid), str(args.grid)
    if stored is not None:
        key = extravars.GRID_KEY  # a config's own extra vars are part of the plan
        items = stored.get("configs", [])
        raws = [{**item["config"], **({key: item[key]} if key in item else {})} for item in items]
        original = str(stored.get("grid_source") or "plan.json").removesuffix(" (resumed)")
        return raws, f"{original} (resumed)"
    return grid_from_target(target), f"{args.inventory}: sweep_grid"


def plan_from_args(args: argparse.Namespace, target: Target | None = None) -> PlannedRun:
    """Everything the command line asks for, validated; :class:`PlanError` names what is refused. ``target``: the
    host already resolved from the command line (else it is resolved here)."""
    extra_vars = parse_extra_vars(args.extra_var)
    target = target or target_from_args(args, extra_vars)
    run_dir: state.RunDir | None = None
    stored: dict[str, Any] | None = None
    if args.run_id is not None and not RUN_ID_RE.match(args.run_id):
        raise PlanError([f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only"])
    if args.resume:
        run_dir, stored = _resumed(args, target)
    raws, source = _grid(args, target, stored)
    bench = bench_plan(args, stored, target)
    if not extra_vars and stored is not None and isinstance(stored.get("extra_vars"), dict):
        extra_vars = dict(stored["extra_vars"])
    if args.reconfigurer == "local" and not target.simulated:
        raise PlanError(["--reconfigurer local runs the simulated engine; this inventory's engine is real"])
    run_name = run_dir.run_id if run_dir is not None else "?"
    plan = make_plan(
        target, raws, grid_source=source, bench=bench, results_root=args.results,
        sampling=run_sampling(args, stored),
        lossless_mode=lossless_restart.resume_mode(args.lossless_restart, stored, run=run_name),
    )  # fmt: skip
    return PlannedRun(plan, target, run_dir, extra_vars)


def _report(args: argparse.Namespace, run_dir: state.RunDir, console: Console) -> ExitCode | None:
    """The report and the manifest at the end (unless ``--no-report``); an exit code when interrupted."""
    if args.no_report:
        return None
    try:
        paths = build_report(run_dir.path)
        manifest.write(run_dir.path)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted; the results are complete: python -m repro_py.report {run_dir.path}[/]")
        return ExitCode.INTERRUPTED
    console.print(f"report: {paths['summary_md']}  manifest: {run_dir.path / manifest.MANIFEST_NAME}")
    return None


def _host_class(args: argparse.Namespace, planned: PlannedRun, console: Console) -> dict[str, Any] | None:
    """The host's hardware class, recorded in the plan and every result; a host whose class cannot be read (not
    reachable, the patch series missing or not this bundle's) is refused, except by ``--dry-run``, which says why
    a run would be."""
    try:
        return class_of(BUNDLE, planned.target, local=args.reconfigurer == "local", extra_vars=planned.extra_vars)
    except PlanError as exc:
        if not args.dry_run:
            raise
        console.print(f"[yellow]hardware class not read ({'; '.join(exc.problems)}): a run would be refused[/]",
                      highlight=False)  # fmt: skip
        return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
    out = Console(width=None if sys.stdout.isatty() else 160)
    results_root: Path = args.results
    try:
        targets = load_targets(
            args.inventory, limit=args.limit_hosts, layers=args.layers, access=access_from_args(args),
            extra_vars=parse_extra_vars(args.extra_var),
        )  # fmt: skip
        if len(targets) > 1:  # several hosts: each measures the grid of its class, side by side
            return fleet.run_fleet(args, targets, bundle=BUNDLE, console=console, out=out)
        planned = plan_from_args(args, targets[0])
        host_class = _host_class(args, planned, console)
    except PlanError as exc:
        console.print("[red]the plan was refused; nothing was restarted:[/]")
        for problem in exc.problems:
            console.print(f"  - {problem}", markup=False, highlight=False)
        return ExitCode.USAGE
    plan, target, run_dir = planned.plan, planned.target, planned.run_dir

    try:
        sandbox = coding_sandbox(allow_unisolated=args.allow_unisolated)
    except IsolationUnavailable as exc:
        return refuse_unisolated(console, exc)
    run_id = run_dir.run_id if run_dir else (args.run_id or default_run_id(target))
    if host_class is not None:
        out.print(f"host {target.host}: hardware class {host_class['key']}", highlight=False)
    print_plan(out, plan, run_id)
    print_gates(out, sandbox, plan)
    if args.dry_run:
        return ExitCode.OK

    if run_dir is None:
        run_dir = state.RunDir(results_root / run_id)
        if run_dir.path.exists():
            console.print(f"[red]{run_dir.path} exists; pass --resume to continue it or another --run-id[/]")
            return ExitCode.USAGE

    if args.reconfigurer == "local" and planned.extra_vars:  # its own engine on a free loopback port: no host
        console.print("[yellow]--extra-var is for the Ansible play; the local reconfigurer ignores it[/]")
    chosen = open_reconfigurer(
        args.reconfigurer, plan, bundle=BUNDLE, limit=args.limit_hosts, extra_vars=planned.extra_vars, run_id=run_id,
        takeover=args.take_over_lease, console=console,
        command=["python", "-m", "repro_py.sweep", *(sys.argv[1:] if argv is None else argv)],
    )  # fmt: skip
    if isinstance(chosen, ExitCode):
        return chosen
    plan, reconfigurer, lease = chosen
    try:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        extra = {"extra_vars": planned.extra_vars, "reconfigurer": args.reconfigurer, "sandbox": sandbox,
                 "host_class": host_class}  # fmt: skip
        write_json_atomic(run_dir.plan, {**plan.as_dict(run_id), **extra})
        runner = SweepRunner(
            plan,
            run_dir,
            reconfigurer,
            BundleMeasure(
                gates_kwargs={"allow_unisolated": args.allow_unisolated}, sampled_reference=run_dir.sampled_reference
            ),
            bundle=BUNDLE,
            options=SweepOptions(restore=not args.no_restore, retry_failed=args.retry_failed, host_class=host_class),
            console=console,
        )
        outcome = asyncio.run(runner.run())
    except KeyboardInterrupt:
        run_dir.write_state(state.STATE_INTERRUPTED, reason="KeyboardInterrupt")
        print_resume(console, "interrupted", args.inventory, run_id, results=results_root, sources=source_args(target))
        return ExitCode.INTERRUPTED
    finally:
        reconfigurer.close()
        if lease is not None:  # the whole sweep ran under it, the restore included
            console.print(lease.release(), markup=False, highlight=False)
    if outcome.interrupted:
        what = f"interrupted after {len(outcome.ran)} configs; results so far in {run_dir.path}"
        print_resume(console, what, args.inventory, run_id, results=results_root, sources=source_args(target))
        return ExitCode.INTERRUPTED

    console.print(
        f"sweep {run_id}: {len(outcome.ran)} ran, {len(outcome.skipped)} already done, "
        f"{len(outcome.failed)} failed, {outcome.wall_s:.1f} s"
    )
    for label, reason in outcome.failed.items():
        console.print(f"  FAILED {label}: {reason}", markup=False, highlight=False)
    interrupted = _report(args, run_dir, console)
    if interrupted is not None:
        return interrupted
    restore = outcome.restore or {}
    if restore.get("status") == "failed":
        console.print(f"[red]restoring the default config failed: {escape(str(restore.get('reason')))}[/]")
        return ExitCode.FAILURE
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
