"""What a sweep prints (the tuner too): the plan and its estimate, how the gates will judge, a refused run,
and the command that resumes one."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from repro_py.codeeval.sandbox import IsolationUnavailable
from repro_py.exitcodes import ExitCode
from repro_py.spec_config import FIELDS
from repro_py.sweep.estimate import estimate_basis, format_duration
from repro_py.sweep.plan import Plan

#: The plan table's column of a field, where it is not the short key (the table is wide enough as it is).
_COLUMN_TITLES = {"block_size": "block"}


def print_plan(console: Console, plan: Plan, run_id: str) -> None:
    title = f"sweep plan {run_id}: {len(plan.configs)} configs on {plan.target.host} ({plan.target.endpoint.base_url})"
    if plan.simulated:
        title = "SIMULATED " + title
    table = Table(title=title)
    for col in ("#", "label", *(_COLUMN_TITLES.get(f.key, f.key) for f in FIELDS), "sim_fault", "sampling"):
        table.add_column(col)
    for index, cfg in enumerate(plan.configs, start=1):
        table.add_row(
            str(index),
            cfg.label,
            *("-" if v is None else str(v) for v in (getattr(cfg.spec, f.key) for f in FIELDS)),
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
