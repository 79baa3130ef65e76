"""Command line of the benchmark: ``python -m repro_py.bench --url URL [...]``.

``-i INVENTORY`` instead of ``--url`` takes the URL, the model name and both API
keys from the inventory, resolved as its plays resolve it (vault options as
ansible-playbook's); otherwise the keys come from ``$SGLANG_API_KEY`` and
``$SGLANG_ADMIN_API_KEY`` (the admin key flushes the cache between cells).

Runs the matrix against a running server, prints a table and, with ``--out``,
writes the result JSON atomically. Exit codes (``repro_py.exitcodes``): 0
(``OK``) every cell ran with no failed repeat, or was skipped with a reason;
1 (``FAILURE``) a cell failed (a failed repeat, the server stopped answering,
the prompt check) or the server could not be reached; 2 (``USAGE``) bad
arguments; 130 (``INTERRUPTED``) interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from repro_py import sampling_settings
from repro_py.atomicio import write_json_atomic
from repro_py.bench.matrix import DEFAULT_CONCURRENCY, DEFAULT_CONTEXTS, BenchSettings, cell_ok, run_matrix
from repro_py.cliparse import parse_or_exit_code
from repro_py.exitcodes import ExitCode
from repro_py.inventory_endpoint import add_arguments as add_endpoint_arguments
from repro_py.inventory_endpoint import endpoint_from_args
from repro_py.sampling_settings import DEFAULT_TEMPERATURE, DEFAULT_TOP_P
from repro_py.simmark import sim_note


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more positive integers, e.g. 60,1024")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m repro_py.bench", description=__doc__.split("\n\n")[0])
    add_endpoint_arguments(p)
    p.add_argument("--contexts", type=int_list, default=DEFAULT_CONTEXTS,
                   help="prompt lengths in tokens (default: 60,1024,4096,8192)")
    p.add_argument("--concurrency", type=int_list, default=DEFAULT_CONCURRENCY,
                   help="concurrent requests (default: 1,8,32,64)")
    p.add_argument("--repeats", type=int, default=3, help="measured repeats per cell (default: 3)")
    p.add_argument("--max-tokens", type=int, default=512, help="max_tokens per request (default: 512)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up requests per cell, excluded (default: 1)")
    p.add_argument("--cv-threshold", type=float, default=0.05,
                   help="a cell whose throughput CV exceeds this is marked noisy (default: 0.05)")
    p.add_argument("--requests-per-cell", type=int, default=None,
                   help="requests per repeat (default: the cell's concurrency)")
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE,
                   help="sampling temperature sent with every request, >= 0 (default: 0, greedy; the OpenAI "
                        "client's default request samples at 1.0)")
    p.add_argument("--top-p", type=float, default=DEFAULT_TOP_P,
                   help="nucleus sampling top_p sent with every request, in (0, 1] (default: 1)")
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds (default: 600)")
    p.add_argument("--error-budget", type=int, default=0,
                   help="failed requests a repeat may have and still count, if the server stayed up and answered "
                        "after them (default: 0; a repeat over it, or whose server stopped answering or restarted, "
                        "is failed and left out of every figure)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="ask the server to ignore EOS so every request generates max_tokens (sglang extension)")
    p.add_argument("--no-flush", action="store_true", help="do not POST /flush_cache between cells and repeats")
    p.add_argument("--out", type=Path, default=None, help="write the result JSON here (atomically)")
    p.add_argument("--quiet", action="store_true", help="no per-cell progress lines on stderr")
    return p


def _fmt(x: object, spec: str = ".1f") -> str:
    if x is None:
        return "-"
    if isinstance(x, int | float):
        return format(x, spec)
    return str(x)


def render_table(result: dict[str, Any], console: Console) -> None:
    engine = result.get("engine", {})
    budget = int(result["settings"].get("error_budget") or 0)
    sampling = sampling_settings.of_result(result)
    title = (
        f"{result['settings']['url']}  engine={engine.get('kind')} version={engine.get('version')}  "
        f"sampling {sampling.text}"
    )
    if engine.get("kind") == "simulated":
        title += f"\n{sim_note([engine.get('sim_speed')])}"
    table = Table(title=title)
    for col in ("ctx", "C", "status", "tok/s", "CV", "tok/s/req", "TTFT p50/p99 ms", "ITL/chunk p50/p99 ms",
                "ITL/token p50/p99 ms", "client/engine e2e", "accept (steps)", "repeats ok", "errors",
                "budget used", "note"):
        table.add_column(col)
    for cell in result["cells"]:
        med = cell.get("median") or {}
        cv = (cell.get("cv") or {}).get("output_tps")
        ttft = med.get("ttft_ms") or {}
        itl = med.get("itl_chunk_ms") or {}
        itl_token = med.get("itl_token_ms") or {}
        ratio = (med.get("timing_ratio") or {}).get("e2e_mean_ms")
        accept = med.get("accept_length")
        accept_txt = f"{accept:.2f} ({med.get('verify_steps')})" if accept is not None else "-"
        note = cell.get("reason") or med.get("accept_length_reason") or ""
        if cell.get("noisy"):
            note = ("NOISY " + note).strip()
        status_style = {"ok": "green", "skipped": "yellow", "failed": "red"}.get(cell["status"], "")
        repeats = cell.get("repeats") or []
        table.add_row(
            str(cell["context"]), str(cell["concurrency"]), f"[{status_style}]{cell['status']}[/]",
            _fmt(med.get("output_tps")), _fmt(cv, ".3f"), _fmt(med.get("output_tps_per_request")),
            f"{_fmt(ttft.get('p50'))}/{_fmt(ttft.get('p99'))}", f"{_fmt(itl.get('p50'))}/{_fmt(itl.get('p99'))}",
            f"{_fmt(itl_token.get('p50'), '.2f')}/{_fmt(itl_token.get('p99'), '.2f')}", _fmt(ratio, ".3f"),
            accept_txt, f"{cell.get('repeats_ok', 0)}/{len(repeats)}" if repeats else "-",
            _fmt(cell.get("errors"), "d"), f"{cell.get('budget_used', 0)}/{budget}" if repeats else "-", note,
        )
    console.print(table)
    console.print(f"error budget: {budget} failed requests per repeat, counted only from a server that stayed up "
                  f"and answered after them; budget used: the most one counted repeat spent", highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        endpoint = endpoint_from_args(args)
        settings = BenchSettings(
            contexts=args.contexts, concurrency=args.concurrency, repeats=args.repeats, max_tokens=args.max_tokens,
            warmup=args.warmup, cv_threshold=args.cv_threshold, requests_per_cell=args.requests_per_cell,
            temperature=args.temperature, top_p=args.top_p, request_timeout_s=args.timeout,
            flush_cache=not args.no_flush,
            ignore_eos=args.ignore_eos, error_budget=args.error_budget,
        )
    except ValueError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    err = Console(stderr=True)

    def progress(cell: dict[str, Any]) -> None:
        if args.quiet:
            return
        med = cell.get("median") or {}
        err.print(
            f"cell ctx={cell['context']} C={cell['concurrency']}: {cell['status']}"
            + (f" {med.get('output_tps'):.1f} tok/s" if med.get("output_tps") is not None else "")
            + (f" ({cell['reason']})" if cell.get("reason") else ""),
            highlight=False,
        )

    try:
        result = asyncio.run(run_matrix(endpoint, settings, progress=progress))
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if args.out is not None:
        write_json_atomic(args.out, result)
    out = Console()
    if not out.is_terminal:
        out = Console(width=max(out.width, 160))
    render_table(result, out)
    if result["engine"].get("kind") is None:
        print(f"bench: server unreachable: {result['engine'].get('server_info_error')}", file=sys.stderr)
        return int(ExitCode.FAILURE)
    if result.get("server_lost"):
        print(f"bench: {result['server_lost']}", file=sys.stderr)
    failed = [c for c in result["cells"] if not cell_ok(c)]
    if failed:
        print(f"bench: {len(failed)}/{len(result['cells'])} cells failed; first: context={failed[0]['context']} "
              f"concurrency={failed[0]['concurrency']}: {failed[0]['reason']}", file=sys.stderr)
        return int(ExitCode.FAILURE)
    return int(ExitCode.OK)
