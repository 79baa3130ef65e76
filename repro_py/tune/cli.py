"""``python -m repro_py.tune INVENTORY --objective OBJ [options]``: find the best config and write it back.

Exit codes (:class:`repro_py.exitcodes.ExitCode`): 0 the search ran to its
end (budget, convergence or the whole space); 1 it ran, but restoring the
default config failed, or a written change is not in effect; 2 bad command
line, space or settings (nothing was restarted); 4 no isolating sandbox for
the coding gate and no ``--allow-unisolated`` (nothing was restarted); 130
interrupted (resumable).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py import manifest
from repro_py.atomicio import write_json_atomic
from repro_py.cliparse import parse_or_exit_code
from repro_py.exitcodes import ExitCode
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT
from repro_py.sweep.lease import TAKEOVER_FLAG
from repro_py.sweep.restarter import open_reconfigurer
from repro_py.tune import fleet as fleetmod
from repro_py.tune import ladder as laddermod
from repro_py.tune import objectives as objmod
from repro_py.tune import proposals, summary, writeback
from repro_py.tune.book import TuneOutcome
from repro_py.tune.commands import RECONFIGURERS, run_options
from repro_py.tune.fleet import FleetSelection
from repro_py.tune.fleetloop import FleetTuneLoop
from repro_py.tune.loop import TuneLoop
from repro_py.tune.noise import DEFAULT_CONFIDENCE, DEFAULT_FLOOR_CV
from repro_py.tune.outcome import search_document
from repro_py.tune.report import write_report
from repro_py.tune.runsetup import DEFAULT_MAX_RESTARTS, TuneRun, new_search, run_from_args
from repro_py.tune.search import Search
from repro_py.tune.sweepio import (
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    BundleMeasure,
    IsolationUnavailable,
    PlanError,
    RunDir,
    add_inventory_arguments,
    add_lossless_restart,
    build_report,
    coding_sandbox,
    default_run_id,
    print_gates,
    print_resume,
    refuse_unisolated,
    source_args,
)

TOOL = "repro_py.tune"
#: the repository (playbooks, roles, inventories) the plays run from
BUNDLE = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m repro_py.tune",
        description="Search the speculative-decoding configs of one host for the best one per objective, "
        "restarting through the sweep's path, and write the winner back to the inventory.",
    )
    p.add_argument("inventory", type=Path, help="Ansible inventory (e.g. inventory/local)")
    add_inventory_arguments(p)
    _add_search_arguments(p)
    _add_run_arguments(p)
    return p


def _add_search_arguments(p: argparse.ArgumentParser) -> None:
    """What to search for and how closely: objectives, space, budget, SLOs, the ladder, confidence, sampling."""
    p.add_argument(
        "--objective",
        action="append",
        default=[],
        metavar="OBJ",
        help="single-stream, throughput or long-context (repeatable or comma-separated; the first one's "
        "winner is written back)",
    )
    p.add_argument(
        "--space",
        type=Path,
        help="YAML space (configs: and/or grid:); default: the inventory's tune_space, else the built-in space",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--max-restarts",
        type=int,
        help=f"hard limit on engine restarts, the final restore included (default {DEFAULT_MAX_RESTARTS})",
    )
    budget.add_argument("--max-hours", type=float, help="hard limit on the time spent restarting and measuring")
    p.add_argument("--max-restarts-per-host", type=int, metavar="N",
                   help="several hosts: the most restarts one host makes, its final restore included (default: "
                   "only --max-restarts, which counts every host's)")  # fmt: skip
    p.add_argument("--host-offset-limit", type=float, default=DEFAULT_LIMIT, metavar="FRACTION",
                   help="several hosts: a host whose restart of the current config differs from the class median "
                   f"by more than this is taken out of the run (default {DEFAULT_LIMIT})")  # fmt: skip
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="METRIC<=VALUE",
        help="a constraint every winner must meet, e.g. ttft_p99_ms<=2000, single_stream_tps>=120, "
        "coding_pass_rate>=1 (repeatable)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=objmod.DEFAULT_CONCURRENCY,
        help="throughput objective's concurrency (default 32)",
    )
    p.add_argument(
        "--long-context",
        type=int,
        default=objmod.DEFAULT_LONG_CONTEXT,
        help="long-context objective's prompt length in tokens (default 4096)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=laddermod.DEFAULT_FULL_TOKENS,
        help="output tokens at the full rung (default 512)",
    )
    p.add_argument(
        "--repeats", type=int, default=laddermod.DEFAULT_FULL_REPEATS, help="repeats at the full rung (default 3)"
    )
    p.add_argument(
        "--screen-tokens",
        type=int,
        default=laddermod.DEFAULT_SCREEN_TOKENS,
        help="output tokens at the screen rung (default 64)",
    )
    p.add_argument(
        "--screen-repeats",
        type=int,
        default=laddermod.DEFAULT_SCREEN_REPEATS,
        help="repeats at the screen rung (default 3)",
    )
    p.add_argument(
        "--confidence",
        type=float,
        default=DEFAULT_CONFIDENCE,
        help="interval level for dropping a config and for winners (default 0.9)",
    )
    p.add_argument(
        "--noise-floor",
        type=float,
        default=DEFAULT_FLOOR_CV,
        help="between-restart relative noise assumed until two restarts of the current config measure it, "
        f"then a prior worth one restart (default {DEFAULT_FLOOR_CV})",
    )
    p.add_argument(
        "--temperature", type=float,
        help="sampling temperature of every benchmark request, >= 0 (default 0: greedy; a DDTree server "
        "refuses temperature > 0 today, see docs/tune.md)",
    )  # fmt: skip
    p.add_argument("--top-p", type=float, help="top_p of every benchmark request, in (0, 1] (default 1)")


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """How the run goes: its directory, resume, dry run, write-back, restore, reconfigurer, report, sandbox."""
    p.add_argument("--run-id", help="name of the run directory (default: <UTC time>-<host>)")
    p.add_argument("--results", type=Path, default=Path("results"), help="results root (default: results/)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue a run: --run-id, else the latest unfinished tuning run (its stored settings; a larger "
        "budget continues a finished search)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="validate the space, print the plan and estimate; run nothing"
    )
    write = p.add_mutually_exclusive_group()
    write.add_argument("--write", action="store_true", help="write the winner to the inventory (after the diff)")
    write.add_argument("--no-write", action="store_true", help="only show the diff, never ask")
    p.add_argument("--no-restore", action="store_true", help="leave the last restart running (as in a sweep)")
    p.add_argument("--limit-hosts", metavar="PATTERN",
                   help="the hosts to tune (a host, a group or a pattern, as Ansible reads it); several hosts of "
                   "one hardware class are measured side by side")  # fmt: skip
    add_lossless_restart(p)
    p.add_argument(
        "-e",
        "--extra-var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra var for every reconfigure play, e.g. sglang_service_sim_speed=10",
    )
    p.add_argument(
        "--reconfigurer",
        choices=RECONFIGURERS,
        help="ansible: playbooks/reconfigure.yml (default); local: the simulated engine as a local "
        "process (simulated inventories only; development aid; no -e). --resume keeps the run's own",
    )
    p.add_argument("--no-report", action="store_true", help="skip the reports and the manifest at the end")
    p.add_argument("--allow-unisolated", action="store_true",
                   help="judge coding candidates even without an isolating sandbox (as for a sweep)")
    p.add_argument(TAKEOVER_FLAG, action="store_true", help="take the host lease over (as for a sweep)")


def _preview(run: TuneRun, resume: bool, hosts: int) -> list[str]:
    """The first configs the search will restart (a fresh search's first three), for the printed plan."""
    if resume:
        return ["(continues the stored search)"]
    if hosts > 1:
        default = run.plan.default_config
        current = "-" if default is None else default.label
        baseline = any(c.spec.algorithm == "none" for c in run.settings.space.configs)
        return [*(["baseline"] if baseline else []), f"{current} on each of the {hosts} hosts"]
    preview, first = new_search(run.settings, run.plan), []
    for _ in range(3):
        proposal = proposals.propose(preview)
        if proposal is None:
            break
        preview.start(proposal)
        first.append(proposal.cfg.label)
    return first


def _write_run_files(
    run: TuneRun, run_dir: RunDir, run_id: str, sandbox: dict[str, Any], selection: FleetSelection | None
) -> dict[str, Any]:
    """``tune/settings.json`` (with the reconfigurer, extra vars and host limit: what --resume and printed commands
    keep; on several hosts their names and class) and, unless it is there, ``plan.json``; the settings document."""
    run_dir.path.mkdir(parents=True, exist_ok=True)
    settings_doc = run.settings.as_dict()
    settings_doc.update(run.run_opts)
    if selection is not None:
        settings_doc.update(hosts=selection.names(), host_class=selection.class_key)
    write_json_atomic(run_dir.path / "tune" / "settings.json", settings_doc)
    plan_doc = run.plan.as_dict(run_id)
    plan_doc.update(
        configs=[], extra_vars=run.run_opts["extra_vars"], reconfigurer=run.run_opts["reconfigurer"], tool=TOOL,
        sandbox=sandbox,
    )  # fmt: skip
    if not run_dir.plan.is_file():
        write_json_atomic(run_dir.plan, plan_doc)
    return settings_doc


def _finish(
    args: argparse.Namespace, search: Search, run_dir: RunDir, doc: dict[str, Any], console: Console
) -> None:
    """The reports and the manifest (unless ``--no-report``: then only ``tune/search.json``)."""
    if args.no_report:
        write_json_atomic(run_dir.path / "tune" / "search.json", doc)
        return
    build_report(run_dir.path)
    paths = write_report(doc, run_dir.path)
    manifest.write(run_dir.path)
    console.print(
        f"report: {paths['report_md']}  (sweep view: {run_dir.path / 'summary.md'})  manifest: "
        f"{run_dir.path / manifest.MANIFEST_NAME}"
    )


def _run_loop(loop: TuneLoop | FleetTuneLoop, run_dir: RunDir, args: argparse.Namespace) -> TuneOutcome:
    """Search (a finished run resumed without a larger budget: replay its results)."""
    state = run_dir.read_state()
    if args.resume and state.get("status") == STATE_COMPLETE and not (args.max_restarts or args.max_hours):
        reused = loop.replay()
        restore = state.get("restore")
        restores = len((restore or {}).get("hosts") or {}) or (1 if (restore or {}).get("status") else 0)
        return TuneOutcome(False, str(state.get("stop_reason") or "complete"), loop.restarts_used() + restores, [],
                           reused, restore, 0.0)  # fmt: skip
    return asyncio.run(loop.run())


@dataclasses.dataclass
class _Prepared:
    """A validated run, before any restart: what it measures, on which hosts, where it writes."""

    run: TuneRun
    selection: FleetSelection | None
    run_id: str
    sandbox: dict[str, Any]


def _prepare(args: argparse.Namespace, console: Console, out: Console) -> _Prepared | int:
    """Everything checked and printed before the first restart; an exit code when refused (or a dry run)."""
    try:
        run = run_from_args(args)
        selection = None
        if len(run.targets) > 1:  # several hosts: one class, measured side by side
            selection = fleetmod.select(BUNDLE, run.targets, local=run.run_opts["reconfigurer"] == "local",
                                        extra_vars=run.run_opts["extra_vars"], console=console)  # fmt: skip
    except (PlanError, objmod.ObjectiveError, laddermod.LadderError, ValueError) as exc:
        problems = exc.problems if isinstance(exc, PlanError) else [str(exc)]
        console.print("[red]the tuning run was refused; nothing was restarted:[/]")
        for problem in problems:
            console.print(f"  - {problem}", markup=False, highlight=False)
        return ExitCode.USAGE
    try:
        sandbox = coding_sandbox(allow_unisolated=args.allow_unisolated)
    except IsolationUnavailable as exc:
        return refuse_unisolated(console, exc)
    run_id = run.run_dir.run_id if run.run_dir else (args.run_id or default_run_id(run.target))
    hosts = 1 if selection is None else len(selection.members)
    if selection is not None:
        out.print(f"class {selection.class_key}: {hosts} host(s): {', '.join(selection.names())}", highlight=False)
    summary.print_plan(out, run.settings, run.plan, run_id, _preview(run, args.resume, hosts))
    print_gates(out, sandbox, run.plan)
    if args.dry_run:
        return ExitCode.OK
    if run.run_dir is None and (args.results / run_id).exists():
        console.print(f"[red]{args.results / run_id} exists; pass --resume to continue it or another --run-id[/]")
        return ExitCode.USAGE
    return _Prepared(run, selection, run_id, sandbox)


def _open_loop(
    args: argparse.Namespace, prep: _Prepared, *, run_dir: RunDir, search: Search, console: Console,
    argv: Sequence[str],
) -> tuple[TuneLoop | FleetTuneLoop, Callable[[], None]] | int:
    """The loop on the host (its lease taken) or on the hosts (theirs), and what closes it; an exit code when no
    host could be had."""
    run, measure = prep.run, BundleMeasure(gates_kwargs={"allow_unisolated": args.allow_unisolated},
                                           sampled_reference=run_dir.sampled_reference)  # fmt: skip
    opts = run.run_opts
    if prep.selection is not None:
        hosts = fleetmod.open_selection(
            BUNDLE, prep.selection, local=opts["reconfigurer"] == "local", extra_vars=opts["extra_vars"],
            run_id=prep.run_id, takeover=args.take_over_lease, console=console,
        )  # fmt: skip
        if not hosts:
            console.print("[red]no host could be leased; nothing was restarted[/]")
            return ExitCode.LEASED
        fleet = FleetTuneLoop(run.plan, search, run_dir, hosts, measure, bundle=BUNDLE, budget=run.settings.budget,
                              class_key=prep.selection.class_key, offset_limit=run.settings.host_offset_limit,
                              console=console)  # fmt: skip
        return fleet, lambda: None  # each host is released at the loop's end
    chosen = open_reconfigurer(  # one host lease for the whole run (repro_py.sweep.lease)
        opts["reconfigurer"], run.plan, bundle=BUNDLE, limit=args.limit_hosts, extra_vars=opts["extra_vars"],
        run_id=prep.run_id, takeover=args.take_over_lease, console=console, command=["python", "-m", TOOL, *argv],
    )  # fmt: skip
    if isinstance(chosen, ExitCode):
        return chosen
    plan, reconfigurer, lease = chosen

    def close() -> None:
        reconfigurer.close()
        if lease is not None:
            console.print(lease.release(), markup=False, highlight=False)

    one = TuneLoop(plan, search, run_dir, reconfigurer, measure, bundle=BUNDLE, budget=run.settings.budget,
                   console=console)  # fmt: skip
    return one, close


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_or_exit_code(build_parser(), argv)
    if isinstance(parsed, int):
        return parsed
    args = parsed
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
    out = Console(width=None if sys.stdout.isatty() else 160)
    prep = _prepare(args, console, out)
    if isinstance(prep, int):
        return prep
    run, run_id = prep.run, prep.run_id
    run_dir = run.run_dir or RunDir(args.results / run_id)
    hosts = 1 if prep.selection is None else len(prep.selection.members)
    search = new_search(run.settings, run.plan, hosts)
    opened = _open_loop(args, prep, run_dir=run_dir, search=search, console=console,
                        argv=sys.argv[1:] if argv is None else list(argv))  # fmt: skip
    if isinstance(opened, int):
        return opened
    loop, close = opened
    options = run_options(_write_run_files(run, run_dir, run_id, prep.sandbox, prep.selection))
    resume_line = functools.partial(
        print_resume, console, tool=TOOL, results=args.results, sources=source_args(run.target), options=options
    )
    try:
        outcome = _run_loop(loop, run_dir, args)
    except KeyboardInterrupt:
        run_dir.write_state(STATE_INTERRUPTED, reason="KeyboardInterrupt")
        resume_line("interrupted", str(args.inventory), run_id)
        return ExitCode.INTERRUPTED
    finally:
        close()
    if outcome.interrupted:
        resume_line(f"interrupted after {len(search.records)} configs; results so far in {run_dir.path}",
                    str(args.inventory), run_id)  # fmt: skip
        return ExitCode.INTERRUPTED
    return _conclude(args, prep, outcome, search=search, run_dir=run_dir, options=options, console=console, out=out)


def _conclude(
    args: argparse.Namespace, prep: _Prepared, outcome: TuneOutcome, *, search: Search, run_dir: RunDir,
    options: list[str], console: Console, out: Console,
) -> int:  # fmt: skip
    """Winners, reports, the restore's status and the write-back offer; the exit code."""
    settings_doc = json.loads((run_dir.path / "tune" / "settings.json").read_text(encoding="utf-8"))
    proposals.fit_surrogates(search)
    doc = search_document(search, stop_reason=outcome.stop_reason, settings=settings_doc, restarts=outcome.restarts)
    measured = len({r.base_label for r in search.records.values()})
    console.print(f"tuning {run_dir.run_id}: {measured} of the space's {len(prep.run.settings.space)} configs "
                  f"measured, in {outcome.restarts} restarts; {outcome.stop_reason}")  # fmt: skip
    summary.print_winners(out, search)
    for versus in doc["versus"]:
        out.print(f"- {versus['title']}: {versus['text']}", highlight=False)
    _finish(args, search, run_dir, doc, console)
    code = ExitCode.OK
    restore = outcome.restore or {}
    if restore.get("status") == "failed":
        console.print(f"[red]restoring the default config failed: {restore.get('reason')}[/]")
        code = ExitCode.FAILURE
    if args.no_report:
        console.print("[yellow]--no-report: no manifest, so nothing is written back (provenance needs it)[/]")
        return code
    targets = prep.run.targets if prep.selection is None else prep.selection.members
    wrote = writeback.offer(
        console, search, run_dir, targets, inventory=args.inventory, results=args.results, write=args.write,
        ask=not args.no_write and sys.stdin.isatty(), options=options,
    )  # fmt: skip
    return code if wrote == ExitCode.OK else wrote


if __name__ == "__main__":
    sys.exit(main())
