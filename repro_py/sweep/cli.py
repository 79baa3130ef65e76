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
import datetime as dt
import json
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro_py import manifest, sampling_settings
from repro_py.atomicio import write_json_atomic
from repro_py.codeeval.sandbox import IsolationUnavailable
from repro_py.endpoint import Endpoint
from repro_py.exitcodes import ExitCode
from repro_py.report.render import build_report
from repro_py.sampling_settings import Sampling
from repro_py.simengine.testing import free_port
from repro_py.sweep import extravars, lossless_restart, state
from repro_py.sweep import inventory as inventorymod
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.estimate import estimate_basis, format_duration
from repro_py.sweep.grid import grid_from_target, load_grid_file
from repro_py.sweep.inventory import Target, source_args, target_from_args
from repro_py.sweep.lease import TAKEOVER_FLAG, HostLease
from repro_py.sweep.lease import take as take_lease
from repro_py.sweep.localproc import LocalProcessReconfigurer
from repro_py.sweep.measure import BundleMeasure, coding_sandbox
from repro_py.sweep.plan import Plan, make_plan
from repro_py.sweep.reconfigure import AnsibleReconfigurer
from repro_py.sweep.runner import SweepOptions, SweepRunner

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _ints(values: Sequence[str] | None, flag: str) -> tuple[int, ...] | None:
    if not values:
        return None
    out: list[int] = []
    for value in values:
        for piece in str(value).split(","):
            part = piece.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) < 1:
                raise PlanError([f"{flag} {part!r}: positive integers expected"])
            out.append(int(part))
    return tuple(out)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m repro_py.sweep",
        description="Sweep speculative-decoding configs on one host: reconfigure, benchmark, gate, report.",
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
    p.add_argument("--limit-hosts", metavar="HOST", help="the inventory host (or group) to sweep when it has several")
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


def parse_extra_vars(items: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise PlanError([f"--extra-var {item!r}: KEY=VALUE expected"])
        why = extravars.problem(key, "--extra-var")
        if why is not None:
            raise PlanError([why])
        try:
            out[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise PlanError([f"--extra-var {item!r}: {exc}"]) from exc
    return out


def _stored_plan(run_dir: state.RunDir) -> dict[str, Any] | None:
    try:
        doc = json.loads(run_dir.plan.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _inventory_bench(target: Target) -> BenchPlan:
    """The inventory's ``sweep_bench`` (contexts, concurrency, repeats, max_tokens), over the defaults."""
    spec = target.var("sweep_bench")
    if spec is None:
        return BenchPlan()
    where = f"{target.inventory}: sweep_bench"
    if not isinstance(spec, dict) or set(spec) - {"contexts", "concurrency", "repeats", "max_tokens"}:
        raise PlanError([f"{where} must be a mapping of contexts, concurrency, repeats, max_tokens; got {spec!r}"])
    base = BenchPlan()
    try:
        contexts = _ints([str(v) for v in spec.get("contexts", [])], where + ".contexts") or base.contexts
        concurrency = _ints([str(v) for v in spec.get("concurrency", [])], where + ".concurrency") or base.concurrency
        repeats, max_tokens = int(spec.get("repeats", base.repeats)), int(spec.get("max_tokens", base.max_tokens))
    except (TypeError, ValueError) as exc:
        raise PlanError([f"{where}: {exc}"]) from exc
    return BenchPlan(contexts=contexts, concurrency=concurrency, repeats=repeats, max_tokens=max_tokens)


def _bench_plan(args: argparse.Namespace, stored: dict[str, Any] | None, target: Target) -> BenchPlan:
    base = _inventory_bench(target)
    if stored and isinstance(stored.get("bench"), dict):
        b = stored["bench"]
        base = BenchPlan(
            contexts=tuple(b.get("contexts") or base.contexts),
            concurrency=tuple(b.get("concurrency") or base.concurrency),
            repeats=int(b.get("repeats") or base.repeats),
            max_tokens=int(b.get("max_tokens") or base.max_tokens),
        )
    contexts = _ints(args.bench_contexts, "--bench-contexts") or base.contexts
    concurrency = _ints(args.bench_concurrency, "--bench-concurrency") or base.concurrency
    repeats = base.repeats if args.repeats is None else args.repeats
    max_tokens = base.max_tokens if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise PlanError(["--repeats and --max-tokens must be >= 1"])
    return BenchPlan(contexts=contexts, concurrency=concurrency, repeats=repeats, max_tokens=max_tokens)


def run_sampling(args: argparse.Namespace, stored: dict[str, Any] | None) -> Sampling:
    """The run's sampling setting: the flags, else the resumed run's, else greedy. A resumed run keeps its
    setting: other flags would relabel its configs and leave its results beside others (a new run for that)."""
    try:
        given = sampling_settings.parse(args.temperature, args.top_p)
    except sampling_settings.SamplingError as exc:
        raise PlanError([f"--temperature/--top-p: {p}" for p in exc.problems]) from exc
    if stored is None:
        return given
    recorded = sampling_settings.of_result(stored)  # plan.json carries "sampling" as a result does
    flags = args.temperature is not None or args.top_p is not None
    if flags and given != recorded:
        raise PlanError([
            f"--resume: run {stored.get('run_id')} measures at {recorded.text}; --temperature/--top-p give "
            f"{given.text} (start a new run for another sampling setting)"
        ])  # fmt: skip
    return recorded


def print_plan(console: Console, plan: Plan, run_id: str) -> None:
    title = f"sweep plan {run_id}: {len(plan.configs)} configs on {plan.target.host} ({plan.target.endpoint.base_url})"
    if plan.simulated:
        title = "SIMULATED " + title
    table = Table(title=title)
    for col in ("#", "label", "algorithm", "budget", "topk", "window", "block", "sim_fault", "sampling"):
        table.add_column(col)
    for index, cfg in enumerate(plan.configs, start=1):
        s = cfg.spec
        table.add_row(
            str(index),
            cfg.label,
            s.algorithm,
            *("-" if v is None else str(v) for v in (s.budget, s.topk, s.window, s.block_size)),
            cfg.sim_fault or "",
            cfg.sampling.text,
        )
    console.print(table)
    est = plan.estimate
    b = plan.bench
    console.print(
        f"grid from {plan.grid_source}; bench {len(b.contexts)} contexts {list(b.contexts)} x "
        f"{len(b.concurrency)} concurrency {list(b.concurrency)} x {b.repeats} repeats, max_tokens {b.max_tokens}"
    )
    per = int(est.get("restarts_per_config", 1))
    restarts = f"{per} restarts x " if per > 1 else "restart "
    console.print(
        f"estimated duration: {format_duration(est['total_s'])} "
        f"(per config: {restarts}{format_duration(est['load_s_per_config'])} + {b.cells} cells x "
        f"{est['bench_s_per_cell']:.0f} s + gates {format_duration(est['gates_s_per_config'])}; "
        f"plus restoring the default config)"
    )
    restore = plan.default_config is not None
    console.print(
        f"restarts: {per * len(plan.configs) + restore} ({len(plan.configs)} configs x {per}"
        + (", each config's lossless gate in a restart of its own" if per > 1 else "")
        + (", plus the restore)" if restore else ")")
    )
    console.print(f"estimate basis: {estimate_basis(est)}")
    console.print(f"sampling of every benchmark request: {plan.sampling.text} (an entry's own setting wins)")
    if plan.default_config is not None:
        console.print(f"default config restored at the end: {plan.default_config.label}")



def refuse_unisolated(console: Console, exc: IsolationUnavailable) -> int:
    console.print("[red]the run was refused; nothing was restarted:[/]")
    console.print(f"  - {exc}", markup=False, highlight=False)
    return int(ExitCode.NO_SANDBOX)


def print_gates(console: Console, sandbox: dict[str, Any], plan: Plan) -> None:
    """How the gates will judge: the coding sandbox, the lossless oracle and whether it has a baseline."""
    warn = " [red](UNISOLATED, allowed by --allow-unisolated)[/]" if sandbox["mode"] == "none" else ""
    console.print(f"coding sandbox: {sandbox['mode']}{warn}: {escape(sandbox['description'])}")
    console.print(escape(plan.lossless_restart.summary()), highlight=False)
    console.print(f"figures: {escape(plan.lossless_restart.figures)}", highlight=False)
    if not any(cfg.spec.algorithm == "none" for cfg in plan.configs):
        console.print("[yellow]no baseline (algorithm: none) in the grid: the lossless gate will judge no config[/]")


def default_run_id(target: Target) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    host = re.sub(r"[^A-Za-z0-9._-]", "-", target.host)
    return f"{stamp}-{host}"


def local_reconfigurer(target: Target) -> tuple[Target, LocalProcessReconfigurer]:
    """``--reconfigurer local``: the simulated engine as a local process on a free loopback port, with the
    inventory's simulated load/warmup/speed; the target then points at that port."""
    port = free_port()
    ep = Endpoint(
        f"http://127.0.0.1:{port}", api_key=target.endpoint.api_key, model="default",
        admin_api_key=target.endpoint.admin_api_key,
    )  # fmt: skip
    local = Target(
        inventory=target.inventory, host=target.host, hostvars=target.hostvars, endpoint=ep, engine_kind="simulated"
    )
    tv = target.var
    reconfigurer = LocalProcessReconfigurer(
        port,
        load_s=float(tv("sglang_service_sim_load_seconds", 0.5)),
        warmup_s=float(tv("sglang_service_sim_warmup_seconds", 0.2)),
        speed=float(tv("sglang_service_sim_speed", 1.0)),
        inventory_deterministic=tv(extravars.DETERMINISTIC_VAR) is True,
    )
    return local, reconfigurer


def resume_command(
    inventory: str,
    run_id: str,
    *,
    tool: str = "repro_py.sweep",
    results: Path | None = None,
    sources: Sequence[str] = (),
    options: Sequence[str] = (),
) -> str:
    """The command that resumes a run: the inventory and its ``sources`` (``-i`` layers, vault options),
    ``--results`` when the run is not under the default ``results/``, then ``options`` (the run's own settings
    a resume must keep, e.g. ``--reconfigurer local``)."""
    command = f"python -m {tool} {shlex.join([str(inventory), *sources])} --resume --run-id {shlex.quote(run_id)}"
    if results is not None and results != Path("results"):
        command += f" --results {shlex.quote(str(results))}"
    return " ".join([command, *(shlex.quote(o) for o in options)])


def print_resume(
    console: Console,
    what: str,
    inventory: str,
    run_id: str,
    *,
    tool: str = "repro_py.sweep",
    results: Path | None = None,
    sources: Sequence[str] = (),
    options: Sequence[str] = (),
) -> None:
    """Say what happened, then the resume command (:func:`resume_command`) on a line of its own, never
    wrapped or marked up (copy-paste)."""
    console.print(f"[yellow]{what}; resume with:[/]", highlight=False)
    command = resume_command(inventory, run_id, tool=tool, results=results, sources=sources, options=options)
    console.print(command, soft_wrap=True, markup=False, highlight=False)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
    out = Console(width=None if sys.stdout.isatty() else 160)
    bundle = Path(__file__).resolve().parents[2]
    results_root: Path = args.results
    try:
        extra_vars = parse_extra_vars(args.extra_var)
        target = target_from_args(args, extra_vars)
        run_dir: state.RunDir | None = None
        stored: dict[str, Any] | None = None
        if args.run_id is not None and not RUN_ID_RE.match(args.run_id):
            raise PlanError([f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only"])
        if args.resume:
            if args.run_id:
                run_dir = state.RunDir(results_root / args.run_id)
            else:
                found = state.latest_resumable(results_root)
                if found is None:
                    raise PlanError([f"--resume: no unfinished run under {results_root}; pass --run-id"])
                run_dir = state.RunDir(found)
            stored = _stored_plan(run_dir)
            if stored is None:
                raise PlanError([f"--resume: {run_dir.plan} is missing or unreadable"])
            if stored.get("host") not in (None, target.host):
                raise PlanError([f"--resume: run {run_dir.run_id} swept host {stored.get('host')}, not {target.host}"])
        if args.grid is not None:
            raws = load_grid_file(args.grid)
            source = str(args.grid)
        elif stored is not None:
            key = extravars.GRID_KEY  # a config's own extra vars are part of the plan
            items = stored.get("configs", [])
            raws = [{**item["config"], **({key: item[key]} if key in item else {})} for item in items]
            original = str(stored.get("grid_source") or "plan.json").removesuffix(" (resumed)")
            source = f"{original} (resumed)"
        else:
            raws = grid_from_target(target)
            source = f"{args.inventory}: sweep_grid"
        bench = _bench_plan(args, stored, target)
        if not extra_vars and stored is not None and isinstance(stored.get("extra_vars"), dict):
            extra_vars = dict(stored["extra_vars"])
        if args.reconfigurer == "local" and not target.simulated:
            raise PlanError(["--reconfigurer local runs the simulated engine; this inventory's engine is real"])
        run_name = run_dir.run_id if run_dir is not None else "?"
        plan = make_plan(
            target, raws, grid_source=source, bench=bench, results_root=results_root,
            sampling=run_sampling(args, stored),
            lossless_mode=lossless_restart.resume_mode(args.lossless_restart, stored, run=run_name),
        )  # fmt: skip
    except PlanError as exc:
        console.print("[red]the plan was refused; nothing was restarted:[/]")
        for problem in exc.problems:
            console.print(f"  - {problem}", markup=False, highlight=False)
        return ExitCode.USAGE

    try:
        sandbox = coding_sandbox(allow_unisolated=args.allow_unisolated)
    except IsolationUnavailable as exc:
        return refuse_unisolated(console, exc)
    run_id = run_dir.run_id if run_dir else (args.run_id or default_run_id(target))
    print_plan(out, plan, run_id)
    print_gates(out, sandbox, plan)
    if args.dry_run:
        return ExitCode.OK

    if run_dir is None:
        run_dir = state.RunDir(results_root / run_id)
        if run_dir.path.exists():
            console.print(f"[red]{run_dir.path} exists; pass --resume to continue it or another --run-id[/]")
            return ExitCode.USAGE

    reconfigurer: Any
    lease: HostLease | None = None
    if args.reconfigurer == "local":  # its own engine on a free loopback port: no host, no lease
        if extra_vars:
            console.print("[yellow]--extra-var is for the Ansible play; the local reconfigurer ignores it[/]")
        local_target, reconfigurer = local_reconfigurer(plan.target)
        plan = dataclasses.replace(plan, target=local_target)
    else:
        reconfigurer = AnsibleReconfigurer(bundle, plan.target, limit=args.limit_hosts, extra_vars=extra_vars)
        if not reconfigurer.available():
            console.print(f"[red]{reconfigurer.playbook} does not exist[/]")
            return ExitCode.USAGE
        command = ["python", "-m", "repro_py.sweep", *(sys.argv[1:] if argv is None else argv)]
        lease = take_lease(reconfigurer, run_id, takeover=args.take_over_lease, console=console, command=command)
        if lease is None:
            return ExitCode.LEASED
    try:
        run_dir.path.mkdir(parents=True, exist_ok=True)
        plan_doc = plan.as_dict(run_id)
        plan_doc["extra_vars"] = extra_vars
        plan_doc["reconfigurer"] = args.reconfigurer
        plan_doc["sandbox"] = sandbox
        write_json_atomic(run_dir.plan, plan_doc)
        runner = SweepRunner(
            plan,
            run_dir,
            reconfigurer,
            BundleMeasure(
                gates_kwargs={"allow_unisolated": args.allow_unisolated}, sampled_reference=run_dir.sampled_reference
            ),
            bundle=bundle,
            options=SweepOptions(restore=not args.no_restore, retry_failed=args.retry_failed),
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
    if not args.no_report:
        try:
            paths = build_report(run_dir.path)
            manifest.write(run_dir.path)
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted; the results are complete: python -m repro_py.report {run_dir.path}[/]")
            return ExitCode.INTERRUPTED
        console.print(f"report: {paths['summary_md']}  manifest: {run_dir.path / manifest.MANIFEST_NAME}")
    restore = outcome.restore or {}
    if restore.get("status") == "failed":
        console.print(f"[red]restoring the default config failed: {escape(str(restore.get('reason')))}[/]")
        return ExitCode.FAILURE
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
