"""What a tuning run's command line asks for, validated before anything restarts: the run (new, or resumed with
its stored settings), the settings, the plan the sweep's machinery runs, and that the budget holds the restarts
every run makes. Anything refused is a :class:`PlanError` (or an objective's or ladder's error) naming it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro_py import sampling_settings
from repro_py.sampling_settings import Sampling
from repro_py.tune import ladder as laddermod
from repro_py.tune import objectives as objmod
from repro_py.tune.budget import Budget, budget_problem
from repro_py.tune.commands import resolve_run_settings
from repro_py.tune.noise import NoiseModel
from repro_py.tune.search import Search
from repro_py.tune.settings import TuneSettings
from repro_py.tune.space import Space, load_space, validated
from repro_py.tune.sweepio import (
    RUN_ID_RE,
    BenchPlan,
    Plan,
    PlanError,
    PlannedConfig,
    RunDir,
    Target,
    access_from_args,
    latest_resumable,
    load_targets,
    make_plan,
    parse_extra_vars,
    resume_mode,
)

DEFAULT_MAX_RESTARTS = 12


@dataclasses.dataclass
class TuneRun:
    """A validated tuning run: its settings and plan, the target, the run directory of a resumed run, and the
    reconfigurer, extra vars and host limit it keeps (``tune/settings.json``)."""

    settings: TuneSettings
    plan: Plan
    target: Target
    run_dir: RunDir | None
    run_opts: dict[str, Any]
    #: every host of the selection, ``target`` first; several: the tuner measures on them side by side
    #: (:mod:`repro_py.tune.fleetloop`), each host's class read before any restart
    targets: list[Target] = dataclasses.field(default_factory=list)


def objective_names(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def stored_settings(run_dir: RunDir) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir.path / "tune" / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def latest_tuning_run(results_root: Path) -> Path | None:
    """The most recently updated tuning run under ``results_root`` that did not complete."""
    return latest_resumable(results_root, where=lambda path: (path / "tune" / "settings.json").is_file())


def settings_from_args(args: argparse.Namespace, space: Space, host: str) -> TuneSettings:
    all_objectives = objmod.make_objectives(
        list(objmod.OBJECTIVE_NAMES), concurrency=args.concurrency, long_context=args.long_context
    )
    objectives = objmod.make_objectives(
        objective_names(args.objective), concurrency=args.concurrency, long_context=args.long_context
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
        budget=Budget(max_restarts=args.max_restarts, max_hours=args.max_hours, restore=not args.no_restore,
                      max_per_host=args.max_restarts_per_host),
        sampling=sampling_from_args(args),
        lossless_restart=resume_mode(args.lossless_restart, None, run="-"),
        host_offset_limit=host_offset_limit(args),
    )


def host_offset_limit(args: argparse.Namespace) -> float:
    """``--host-offset-limit``, a fraction in (0, 1); refused (PlanError) naming the value otherwise."""
    limit = float(args.host_offset_limit)
    if not 0 < limit < 1:
        raise PlanError([f"--host-offset-limit {args.host_offset_limit}: a fraction in (0, 1) expected"])
    return limit


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


def with_current_config(settings: TuneSettings, current: PlannedConfig | None) -> TuneSettings:
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


def deployed(plan: Plan, settings: TuneSettings) -> PlannedConfig | None:
    """The inventory's current config at the run's sampling setting (as every config of the space)."""
    return plan.default_config and dataclasses.replace(plan.default_config, sampling=settings.sampling)


def new_search(settings: TuneSettings, plan: Plan, hosts: int = 1) -> Search:
    """A fresh search of the space; on ``hosts`` hosts the current config is restarted once on each (at least
    twice in all: the spread of its restarts is the between-restart noise)."""
    search_settings = settings.search_settings()
    if hosts > 1:
        wanted = max(search_settings.reference_restarts, hosts)
        search_settings = dataclasses.replace(search_settings, reference_restarts=wanted)
    return Search(settings.space, search_settings, settings.noise_model(), default=deployed(plan, settings))


#: what every host of a tuning run over several hosts must agree on (the run measures one space, one way)
SHARED_VARS = ("tune_space", "sweep_default_config", "sweep_bench", "sweep_drafter_block_size")


def shared_settings_problems(targets: Sequence[Target]) -> list[str]:
    """The hosts that differ from the first in what a tuning run over them shares (:data:`SHARED_VARS`)."""
    first = targets[0]
    problems = []
    for other in targets[1:]:
        differ = [v for v in SHARED_VARS if first.var(v) != other.var(v)]
        if differ:
            problems.append(f"{first.host} and {other.host} differ in {', '.join(differ)}; a tuning run over several "
                            "hosts searches one space from one current config (make them equal, or tune them apart "
                            "with --limit-hosts)")  # fmt: skip
    return problems


def _resumed(args: argparse.Namespace) -> tuple[RunDir, dict[str, Any]]:
    """``--resume``: the run (``--run-id``, else the latest unfinished tuning run) and its stored settings."""
    results_root: Path = args.results
    found = results_root / args.run_id if args.run_id else latest_tuning_run(results_root)
    if found is None:
        raise PlanError([f"--resume: no unfinished tuning run under {results_root}; pass --run-id"])
    run_dir = RunDir(found)
    stored = stored_settings(run_dir)
    if stored is None:
        raise PlanError([f"--resume: {run_dir.path / 'tune' / 'settings.json'} is missing or unreadable"])
    return run_dir, stored


def _settings(
    args: argparse.Namespace, target: Target, resumed: tuple[RunDir, dict[str, Any]] | None
) -> TuneSettings:
    """A resumed run's stored settings; else the command line's (``--objective`` required, the default budget)."""
    if resumed is not None:
        run_dir, stored = resumed
        if stored.get("host") != target.host:
            raise PlanError([f"--resume: run {run_dir.run_id} tuned host {stored.get('host')}, not {target.host}"])
        return TuneSettings.from_dict(stored, target, args)
    if not args.objective:
        raise PlanError([f"--objective is required; allowed: {', '.join(objmod.OBJECTIVE_NAMES)}"])
    space = sampled_space(target, load_space(target, args.space), sampling_from_args(args))
    settings = settings_from_args(args, space, target.host)
    if settings.budget.max_restarts is None and settings.budget.max_hours is None:
        settings = dataclasses.replace(
            settings, budget=dataclasses.replace(settings.budget, max_restarts=DEFAULT_MAX_RESTARTS)
        )
    return settings


def _plan(settings: TuneSettings, target: Target, results_root: Path) -> Plan:
    """The sweep's plan of the space: the cells the objectives and SLOs measure, at the full rung."""
    cells = settings.bench_cells()
    return make_plan(
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


def run_from_args(args: argparse.Namespace) -> TuneRun:
    """The tuning run the command line asks for, every part validated (nothing restarted yet)."""
    if args.run_id is not None and not RUN_ID_RE.match(args.run_id):
        raise PlanError([f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only"])
    resumed = _resumed(args) if args.resume else None
    run_opts, problems = resolve_run_settings(
        args.reconfigurer, parse_extra_vars(args.extra_var), args.limit_hosts, resumed[1] if resumed else None
    )
    targets = load_targets(
        args.inventory, limit=run_opts["limit_hosts"], layers=args.layers, access=access_from_args(args),
        extra_vars=run_opts["extra_vars"],
    )  # fmt: skip
    target = targets[0]
    if run_opts["reconfigurer"] == "local" and not all(t.simulated for t in targets):
        problems.append("--reconfigurer local runs the simulated engine; this inventory's engine is real")
    problems += shared_settings_problems(targets)
    if problems:
        raise PlanError(problems)
    settings = _settings(args, target, resumed)
    plan = _plan(settings, target, args.results)
    settings = with_current_config(settings, deployed(plan, settings))
    per_config = plan.lossless_restart.restarts_per_config
    hosts = len(targets)
    budget_issue = budget_problem(new_search(settings, plan, hosts), settings.budget, per_config, hosts=hosts)
    if budget_issue is not None:
        raise PlanError([budget_issue])
    return TuneRun(settings, plan, target, resumed[0] if resumed else None, run_opts, list(targets))
