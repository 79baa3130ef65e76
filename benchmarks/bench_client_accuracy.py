"""Client accuracy and cost of ``repro_py.bench`` against the simulated engine.

    .venv/bin/python benchmarks/bench_client_accuracy.py [--sim-speed 4] [--concurrency 64]
        [--context 1024] [--max-tokens 512] [--requests 128] [--repeats 3] [--json FILE]

Starts the simulated engine (DDTree b8 t4 w2048, metrics on) on a loopback
port pinned to CPU 0, pins this client to CPU 1, and measures one cell
(context x concurrency) ``--repeats`` times with the benchmark's own client
code (``repro_py.bench.matrix.run_requests`` -> ``client.stream_chat``).
For each repeat it prints:

- the client's aggregate output tok/s (server-reported output tokens of the
  successful requests over the first-send .. last-byte span);
- the engine's own figure: the delta of ``sglang:generation_tokens_total``
  over the delta of the engine's busy wall time (``sim.pacing.busy_wall_seconds``
  in server info: time with at least one request waiting or running), so a
  client that leaves the engine idle, or miscounts, shows up as a ratio off 1;
- the ratio client / engine (target: within 2%);
- the client's CPU time over the span as % of one core (``time.process_time``
  and ``resource.getrusage``; target: < 50%), and the chunk rate it parsed.

Every figure here is influenced by the simulated engine and its ``--sim-speed``
(printed with them). It is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from repro_py.bench import counters, stats  # noqa: E402
from repro_py.bench.figures import repeat_figures  # noqa: E402
from repro_py.bench.matrix import flush_cache, run_requests  # noqa: E402
from repro_py.bench.prompts import BuiltPrompt, PromptBuilder  # noqa: E402
from repro_py.bench.server_info import fetch_server_info  # noqa: E402
from repro_py.endpoint import Endpoint  # noqa: E402
from repro_py.simengine.process import Engine, start_engine  # noqa: E402

ENGINE_ARGS = [
    "--speculative-algorithm", "DDTREE", "--speculative-dflash-block-size", "8",
    "--speculative-ddtree-budget", "8", "--speculative-ddtree-topk-cap", "4",
    "--speculative-draft-window-size", "2048", "--enable-metrics",
    "--sim-load-seconds", "0.5", "--sim-warmup-seconds", "0.2",
]


def pin(pid: int, cpu: int) -> str:
    """Pin a process (0 = this one) to one CPU if the machine has it; say what was done."""
    cpus = os.sched_getaffinity(0) if pid == 0 else os.sched_getaffinity(pid)
    if cpu not in cpus and cpu >= (os.cpu_count() or 1):
        return f"not pinned (no CPU {cpu})"
    try:
        os.sched_setaffinity(pid, {cpu})
    except OSError as exc:
        return f"not pinned ({exc})"
    return f"CPU {cpu}"


def start_pinned_engine(sim_speed: float, tmp: Path, extra: list[str] | None = None) -> tuple[Engine, str]:
    eng = start_engine([*ENGINE_ARGS, "--sim-speed", str(sim_speed), *(extra or [])], model_root=tmp)
    where = pin(eng.pid, 0)
    eng.wait_ready(timeout=120)
    return eng, where


def busy_seconds(info_raw: dict[str, Any]) -> float | None:
    sim = info_raw.get("sim")
    pacing = sim.get("pacing") if isinstance(sim, dict) else None
    val = pacing.get("busy_wall_seconds") if isinstance(pacing, dict) else None
    return float(val) if isinstance(val, int | float) else None


async def engine_window(session: aiohttp.ClientSession, ep: Endpoint) -> tuple[counters.CounterSnapshot, float | None]:
    snap = await counters.read_settled(session, ep)
    info = await fetch_server_info(session, ep)
    return snap, busy_seconds(info.raw)


async def measure_repeat(
    session: aiohttp.ClientSession, ep: Endpoint, prompt: BuiltPrompt, *, concurrency: int, requests: int,
    max_tokens: int,
) -> dict[str, Any]:
    """One measured run of the cell with this repository's client; figures plus the engine's own."""
    why = await flush_cache(session, ep)
    if why:
        print(f"  note: {why}")
    snap0, busy0 = await engine_window(session, ep)
    cpu0 = time.process_time()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    results, wall = await run_requests(
        session, ep, prompt, count=requests, concurrency=concurrency, max_tokens=max_tokens, temperature=0.0,
        timeout_s=600.0, ignore_eos=True,
    )
    cpu1 = time.process_time()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    snap1, busy1 = await engine_window(session, ep)
    delta = counters.delta(snap0, snap1)
    fig = repeat_figures(results, wall, delta)
    span = float(fig["wall_s"])
    chunks = sum(len(r.itl_s) + 1 for r in results if r.ok)
    engine_busy = (busy1 - busy0) if busy0 is not None and busy1 is not None else None
    engine_tps = (delta.generation_tokens / engine_busy) if engine_busy and delta.generation_tokens else None
    ru_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {
        "client_tps": fig["output_tps"],
        "client_tokens": fig["output_tokens"],
        "engine_tokens": delta.generation_tokens,
        "engine_busy_s": engine_busy,
        "engine_tps": engine_tps,
        "ratio": fig["output_tps"] / engine_tps if engine_tps else None,
        "span_s": span,
        "cpu_pct": 100.0 * (cpu1 - cpu0) / span,
        "rusage_cpu_pct": 100.0 * ru_cpu / span,
        "chunks_per_s": chunks / span,
        "errors": fig["errors"],
        "accept_length": delta.accept_length,
        "ttft_ms_p50": fig["ttft_ms"]["p50"],
        "itl_chunk_ms_p50": fig["itl_chunk_ms"]["p50"],
        "itl_token_ms_p50": fig["itl_token_ms"]["p50"],
    }


async def prepare(session: aiohttp.ClientSession, ep: Endpoint, context: int, concurrency: int) -> BuiltPrompt:
    prompt = await PromptBuilder(session, ep).build(context, seed=context)
    await run_requests(session, ep, prompt, count=concurrency, concurrency=concurrency, max_tokens=16,
                       temperature=0.0, timeout_s=120.0, variant_base=10_000)  # warm-up, not measured
    return prompt


async def run(args: argparse.Namespace, url: str) -> list[dict[str, Any]]:
    ep = Endpoint(url)
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency + 8)) as session:
        prompt = await prepare(session, ep, args.context, args.concurrency)
        for i in range(args.repeats):
            row = await measure_repeat(session, ep, prompt, concurrency=args.concurrency, requests=args.requests,
                                       max_tokens=args.max_tokens)
            rows.append(row)
            print(f"  repeat {i}: client {row['client_tps']:.1f} tok/s, engine {row['engine_tps']:.1f} tok/s, "
                  f"ratio {row['ratio']:.4f}, client CPU {row['cpu_pct']:.1f}% of one core "
                  f"({row['chunks_per_s']:.0f} chunks/s), errors {row['errors']}", flush=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = ("client_tps", "engine_tps", "ratio", "cpu_pct", "rusage_cpu_pct", "chunks_per_s", "accept_length")
    return {k: stats.median([float(r[k]) for r in rows if r[k] is not None]) for k in keys}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim-speed", type=float, default=4.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--requests", type=int, default=128, help="requests per repeat (default 2 x concurrency)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    client_cpu = pin(0, 1)
    with tempfile.TemporaryDirectory(prefix="bench-accuracy-") as tmp:
        eng, engine_cpu = start_pinned_engine(args.sim_speed, Path(tmp))
        try:
            print(f"engine pid {eng.pid} ({engine_cpu}), client pid {os.getpid()} ({client_cpu}); "
                  f"SIMULATED engine, sim_speed={args.sim_speed:g}")
            print(f"cell: context {args.context}, concurrency {args.concurrency}, {args.requests} requests x "
                  f"max_tokens {args.max_tokens} (ignore_eos), {args.repeats} repeats")
            rows = asyncio.run(run(args, eng.url))
        finally:
            eng.stop()
    med = summarize(rows)
    print(
        f"median: client {med['client_tps']:.1f} tok/s | engine counter {med['engine_tps']:.1f} tok/s | "
        f"ratio {med['ratio']:.4f} (|1 - ratio| = {abs(1 - (med['ratio'] or 0)):.2%}, target <= 2%) | "
        f"client CPU {med['cpu_pct']:.1f}% of one core (getrusage {med['rusage_cpu_pct']:.1f}%, target < 50%) | "
        f"{med['chunks_per_s']:.0f} chunks/s | accept length {med['accept_length']:.2f} | sim_speed {args.sim_speed:g}"
    )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "repeats": rows,
                                         "median": med}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
