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
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py import manifest, sampling_settings
from repro_py.atomicio import write_json_atomic
from repro_py.cliparse import parse_or_exit_code
from repro_py.exitcodes import ExitCode
from repro_py.sampling_settings import Sampling
from repro_py.sweep.lease import TAKEOVER_FLAG, HostLease
from repro_py.sweep.lease import take as take_lease
from repro_py.tune import ladder as laddermod
from repro_py.tune import objectives as objmod
from repro_py.tune import summary, writeback
from repro_py.tune.commands import RECONFIGURERS, resolve_run_settings, run_options
from repro_py.tune.loop import Budget, TuneLoop, budget_problem
from repro_py.tune.noise import DEFAULT_CONFIDENCE, DEFAULT_FLOOR_CV, NoiseModel
from repro_py.tune.outcome import search_document
from repro_py.tune.report import write_report
from repro_py.tune.search import Search
from repro_py.tune.settings import TuneSettings
from repro_py.tune.space import Space, load_space, validated
from repro_py.tune.sweepio import (
    RUN_ID_RE,
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    AnsibleReconfigurer,
    BenchPlan,
    BundleMeasure,
    IsolationUnavailable,
    Plan,
    PlanError,
    PlannedConfig,
    RunDir,
    Target,
    add_inventory_arguments,
    add_lossless_restart,
    build_report,
    coding_sandbox,
    default_run_id,
    latest_resumable,
    local_reconfigurer,
    make_plan,
    parse_extra_vars,
    print_gates,
    print_resume,
    refuse_unisolated,
    resume_mode,
    source_args,
    target_from_args,
)

DEFAULT_MAX_RESTARTS = 12
TOOL = "repro_py.tune"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m repro_py.tune",
        description="Search the speculative-decoding configs of one host for the best one per objective, "
        "restarting through the sweep's path, and write the winner back to the inventory.",
    )
    p.add_argument("inventory", type=Path, help="Ansible inventory (e.g. inventory/local)")
    add_inventory_arguments(p)
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
    p.add_argument("--limit-hosts", metavar="HOST", help="the inventory host to tune when it has several")
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
    return p


def _objective_names(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _stored(run_dir: RunDir) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir.path / "tune" / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def latest_tuning_run(results_root: Path) -> Path | None:
    """The most recently updated tuning run under ``results_root`` that did not complete."""
    return latest_resumable(results_root, where=lambda path: (path / "tune" / "settings.json").is_file())


def _settings_from_args(args: argparse.Namespace, space: Space, host: str) -> TuneSettings:
    all_objectives = objmod.make_objectives(
        list(objmod.OBJECTIVE_NAMES), concurrency=args.concurrency, long_context=args.long_context
    )
    objectives = objmod.make_objectives(
        _objective_names(args.objective), concurrency=args.concurrency, long_context=args.long_context
    )
    slos = tuple(objmod.parse_slo(text) for text in args.slo)
    ladder = laddermod.make_ladder(
        full_tokens=args.max_tokens,
        full_repeats=args.repeats,
        screen_tokens=args.screen_tokens,
        screen_repeats=args.screen_repeats,
    )
    NoiseModel(floor_cv=args.noise_floor, confidence=args.confidence)  # validates both
    return TuneSettings(
        host=host,
        objectives=objectives,
        all_objectives=all_objectives,
        slos=slos,
        ladder=ladder,
        confidence=args.confidence,
        floor_cv=args.noise_floor,
        space=space,
        budget=Budget(max_restarts=args.max_restarts, max_hours=args.max_hours, restore=not args.no_restore),
        sampling=sampling_from_args(args),
        lossless_restart=resume_mode(args.lossless_restart, None, run="-"),
    )


def sampling_from_args(args: argparse.Namespace) -> Sampling:
    """``--temperature``/``--top-p`` (default greedy); a bad value is a PlanError naming it and the range."""
    try:
        return sampling_settings.parse(args.temperature, args.top_p)
    except sampling_settings.SamplingError as exc:
        raise PlanError([f"--temperature/--top-p: {p}" for p in exc.problems]) from exc


def sampled_space(target: Target, space: Space, sampling: Sampling) -> Space:
    """The space with the run's sampling setting on every config (part of each label, never of the restart);
    a config that names its own keeps it."""
    if sampling.default:
        return space
    raws = [{**sampling.short(), **raw} for raw in space.raws]
    return validated(target, raws, source=space.source, capped=space.capped)


def _with_current_config(settings: TuneSettings, current: PlannedConfig | None) -> TuneSettings:
    """Every run measures the inventory's current config (the one to beat): it must name one, and it joins
    the space when the space lacks it."""
    if current is None:
        raise PlanError(
            [
                "the inventory has no sweep_default_config: the tuner measures the current config as the one to "
                "beat (in two restarts, which also measure the between-restart noise); set it to the config the "
                "host runs, e.g. sweep_default_config: {algorithm: ddtree, budget: 8, topk: 4, window: 2048}"
            ]
        )
    return dataclasses.replace(settings, space=settings.space.including(current))


def _deployed(plan: Plan, settings: TuneSettings) -> PlannedConfig | None:
    """The inventory's current config at the run's sampling setting (as every config of the space)."""
    return plan.default_config and dataclasses.replace(plan.default_config, sampling=settings.sampling)


def _search(settings: TuneSettings, plan: Plan) -> Search:
    return Search(settings.space, settings.search_settings(), settings.noise_model(), default=_deployed(plan, settings))


def main(argv: Sequence[str] | None = None) -> int:
    parsed = parse_or_exit_code(build_parser(), argv)
    if isinstance(parsed, int):
        return parsed
    args = parsed
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
    out = Console(width=None if sys.stdout.isatty() else 160)
    bundle = Path(__file__).resolve().parents[2]
    results_root: Path = args.results
    try:
        if args.run_id is not None and not RUN_ID_RE.match(args.run_id):
            raise PlanError([f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only"])
        run_dir: RunDir | None = None
        stored: dict[str, Any] | None = None
        if args.resume:
            found = results_root / args.run_id if args.run_id else latest_tuning_run(results_root)
            if found is None:
                raise PlanError([f"--resume: no unfinished tuning run under {results_root}; pass --run-id"])
            run_dir = RunDir(found)
            stored = _stored(run_dir)
            if stored is None:
                raise PlanError([f"--resume: {run_dir.path / 'tune' / 'settings.json'} is missing or unreadable"])
        run_opts, problems = resolve_run_settings(
            args.reconfigurer, parse_extra_vars(args.extra_var), args.limit_hosts, stored
        )
        target = target_from_args(args, run_opts["extra_vars"], limit=run_opts["limit_hosts"])
        if run_opts["reconfigurer"] == "local" and not target.simulated:
            problems.append("--reconfigurer local runs the simulated engine; this inventory's engine is real")
        if problems:
            raise PlanError(problems)
        if stored is not None and run_dir is not None:
            if stored.get("host") != target.host:
                raise PlanError([f"--resume: run {run_dir.run_id} tuned host {stored.get('host')}, not {target.host}"])
            settings = TuneSettings.from_dict(stored, target, args)
        else:
            if not args.objective:
                raise PlanError([f"--objective is required; allowed: {', '.join(objmod.OBJECTIVE_NAMES)}"])
            space = sampled_space(target, load_space(target, args.space), sampling_from_args(args))
            settings = _settings_from_args(args, space, target.host)
            if settings.budget.max_restarts is None and settings.budget.max_hours is None:
                settings = dataclasses.replace(
                    settings, budget=dataclasses.replace(settings.budget, max_restarts=DEFAULT_MAX_RESTARTS)
                )
        extra_vars: dict[str, object] = run_opts["extra_vars"]
        cells = settings.bench_cells()
        plan = make_plan(
            target,
            list(settings.space.raws),
            grid_source=f"tune space: {settings.space.source}",
            bench=BenchPlan(
                contexts=tuple(sorted({c.context for c in cells})),
                concurrency=tuple(sorted({c.concurrency for c in cells})),
                repeats=settings.ladder[-1].repeats,
                max_tokens=settings.ladder[-1].max_tokens,
            ),
            results_root=results_root,
            sampling=settings.sampling,
            lossless_mode=settings.lossless_restart,
        )
        settings = _with_current_config(settings, _deployed(plan, settings))
        per_config = plan.lossless_restart.restarts_per_config
        budget_issue = budget_problem(_search(settings, plan), settings.budget, per_config)
        if budget_issue is not None:
            raise PlanError([budget_issue])
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
    run_id = run_dir.run_id if run_dir else (args.run_id or default_run_id(target))
    search, preview = _search(settings, plan), _search(settings, plan)
    first = ["(continues the stored search)"] if args.resume else []
    for _ in range(0 if args.resume else 3):
        proposal = preview.propose()
        if proposal is None:
            break
        preview.start(proposal)
        first.append(proposal.cfg.label)
    summary.print_plan(out, settings, plan, run_id, first)
    print_gates(out, sandbox, plan)
    if args.dry_run:
        return ExitCode.OK

    if run_dir is None:
        run_dir = RunDir(results_root / run_id)
        if run_dir.path.exists():
            console.print(f"[red]{run_dir.path} exists; pass --resume to continue it or another --run-id[/]")
            return ExitCode.USAGE
    reconfigurer: Any
    lease: HostLease | None = None  # one host lease for the whole run (repro_py.sweep.lease)
    if run_opts["reconfigurer"] == "local":
        local_target, reconfigurer = local_reconfigurer(plan.target)
        plan = dataclasses.replace(plan, target=local_target)
    else:
        reconfigurer = AnsibleReconfigurer(bundle, plan.target, limit=args.limit_hosts, extra_vars=extra_vars)
        if not reconfigurer.available():
            console.print(f"[red]{reconfigurer.playbook} does not exist[/]")
            return ExitCode.USAGE
        command = ["python", "-m", TOOL, *(sys.argv[1:] if argv is None else argv)]
        lease = take_lease(reconfigurer, run_id, takeover=args.take_over_lease, console=console, command=command)
        if lease is None:
            return ExitCode.LEASED
    run_dir.path.mkdir(parents=True, exist_ok=True)
    settings_doc = settings.as_dict()
    settings_doc.update(run_opts)  # reconfigurer, extra vars, host limit: what --resume and printed commands keep
    options = run_options(settings_doc)
    write_json_atomic(run_dir.path / "tune" / "settings.json", settings_doc)
    plan_doc = plan.as_dict(run_id)
    plan_doc.update(
        configs=[], extra_vars=extra_vars, reconfigurer=run_opts["reconfigurer"], tool=TOOL, sandbox=sandbox
    )
    if not run_dir.plan.is_file():
        write_json_atomic(run_dir.plan, plan_doc)

    measure = BundleMeasure(
        gates_kwargs={"allow_unisolated": args.allow_unisolated}, sampled_reference=run_dir.sampled_reference
    )
    loop = TuneLoop(plan, search, run_dir, reconfigurer, measure, bundle=bundle, budget=settings.budget,
                    console=console)
    finished = (
        args.resume
        and run_dir.read_state().get("status") == STATE_COMPLETE
        and not (args.max_restarts or args.max_hours)
    )
    try:
        if finished:
            loop.replay()
            outcome_stop = str(run_dir.read_state().get("stop_reason") or "complete")
            restore: dict[str, Any] | None = run_dir.read_state().get("restore")
            interrupted = False
        else:
            result = asyncio.run(loop.run())
            outcome_stop, restore, interrupted = result.stop_reason, result.restore, result.interrupted
    except KeyboardInterrupt:
        run_dir.write_state(STATE_INTERRUPTED, reason="KeyboardInterrupt")
        print_resume(
            console, "interrupted", str(args.inventory), run_id, tool=TOOL, results=results_root,
            sources=source_args(target), options=options,
        )  # fmt: skip
        return ExitCode.INTERRUPTED
    finally:
        reconfigurer.close()
        if lease is not None:
            console.print(lease.release(), markup=False, highlight=False)
    if interrupted:
        print_resume(
            console,
            f"interrupted after {len(search.records)} configs; results so far in {run_dir.path}",
            str(args.inventory),
            run_id,
            tool=TOOL,
            results=results_root,
            sources=source_args(target),
            options=options,
        )
        return ExitCode.INTERRUPTED

    search.fit_surrogates()
    restarts = loop.restarts_used() + (1 if (restore or {}).get("status") in ("ok", "failed") else 0)
    doc = search_document(search, stop_reason=outcome_stop, settings=settings_doc, restarts=restarts)
    console.print(f"tuning {run_id}: {len(search.records)} configs restarted of {len(settings.space)}; {outcome_stop}")
    summary.print_winners(out, search)
    for versus in doc["versus"]:
        out.print(f"- {versus['title']}: {versus['text']}", highlight=False)
    if not args.no_report:
        build_report(run_dir.path)
        paths = write_report(doc, run_dir.path)
        manifest.write(run_dir.path)
        console.print(
            f"report: {paths['report_md']}  (sweep view: {run_dir.path / 'summary.md'})  manifest: "
            f"{run_dir.path / manifest.MANIFEST_NAME}"
        )
    else:
        write_json_atomic(run_dir.path / "tune" / "search.json", doc)
    code = ExitCode.OK
    if (restore or {}).get("status") == "failed":
        console.print(f"[red]restoring the default config failed: {(restore or {}).get('reason')}[/]")
        code = ExitCode.FAILURE
    if args.no_report:
        console.print("[yellow]--no-report: no manifest, so nothing is written back (provenance needs it)[/]")
        return code
    wrote = writeback.offer(
        console,
        search,
        run_dir,
        target,
        inventory=args.inventory,
        results=args.results,
        write=args.write,
        ask=not args.no_write and sys.stdin.isatty(),
        options=options,
    )
    return code if wrote == ExitCode.OK else wrote


if __name__ == "__main__":
    sys.exit(main())
