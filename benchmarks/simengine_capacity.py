"""Capacity of the simulated engine on one CPU core.

Starts ``python -m repro_py.simengine`` pinned to one core, drives 64
concurrent streaming chat completions from this process (an aiohttp client
pinned to another core), and prints, per ``--sim-speed``:

- aggregate tokens/s achieved through HTTP (wall clock),
- the engine's own modelled rate (tokens / modelled step time, from
  ``/server_info`` ``sim.pacing``) and the steady-state prediction of
  ``perf_model`` times the speed,
- pacing: achieved / modelled (includes the client's connection ramp and
  tail), the engine's own modelled time / busy wall time (1.0 = it never
  fell behind its pacing), the mean step lag, the steps that ended more
  than 5 ms late, and the largest lag of any step;
- the engine's CPU use (share of its one core) during the run.

The figures are of the simulator itself (how fast it can pace a model), not
of any GPU. Usage::

    python benchmarks/simengine_capacity.py [--streams 64] [--max-tokens 512] [--speeds 4,8,16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repro_py.simengine import perf_model
from repro_py.simengine.process import Engine, start_engine

ENGINE_ARGS = [
    "--speculative-algorithm", "DDTREE", "--speculative-dflash-block-size", "8",
    "--speculative-ddtree-budget", "8", "--speculative-ddtree-topk-cap", "4",
    "--speculative-draft-window-size", "2048", "--sim-load-seconds", "0.2", "--sim-warmup-seconds", "0",
    "--enable-metrics",
]  # fmt: skip


async def _stream(session: aiohttp.ClientSession, url: str, i: int, max_tokens: int) -> tuple[int, int]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": f"capacity stream {i}"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tokens = chunks = 0
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
            elif event.get("choices"):
                chunks += 1
    return tokens, chunks


async def _drive(url: str, streams: int, max_tokens: int) -> tuple[float, int, int]:
    conn = aiohttp.TCPConnector(limit=streams + 8)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.perf_counter()
        results = await asyncio.gather(*(_stream(session, url, i, max_tokens) for i in range(streams)))
        wall = time.perf_counter() - start
    return wall, sum(t for t, _ in results), sum(c for _, c in results)


def _pacing(eng: Engine) -> dict[str, float]:
    pacing: dict[str, float] = eng.get_json("/server_info")["sim"]["pacing"]
    return pacing


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--speeds", default="4,8,16", help="comma-separated --sim-speed values")
    parser.add_argument("--engine-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    ns = parser.parse_args(argv)
    cores = os.sched_getaffinity(0)
    client_core = ns.client_core if ns.client_core in cores else min(cores)
    os.sched_setaffinity(0, {client_core})
    cfg = perf_model.ModelConfig(mode="ddtree", budget=8, topk=4, block_size=8, window=2048)
    steady = perf_model.predict(cfg, ns.streams, 60).aggregate_tps
    print(
        f"SIMULATED engine capacity: {ns.streams} streams x {ns.max_tokens} tokens, DDTree b8 t4, "
        f"engine pinned to core {ns.engine_core}, client on core {client_core}"
    )
    print(f"model steady state at C={ns.streams}: {steady:.1f} tok/s (model time)")
    header = (
        f"{'speed':>6} {'achieved tok/s':>15} {'engine-modelled':>16} {'steady x speed':>15} "
        f"{'achieved/modelled':>18} {'engine pacing':>14} {'mean lag ms':>12} {'late steps':>11} {'max lag ms':>11} "
        f"{'chunks/s':>9} {'engine CPU':>10}"
    )
    print(header)
    with tempfile.TemporaryDirectory(prefix="simengine-capacity-") as tmp:
        for speed in (float(s) for s in ns.speeds.split(",")):
            eng = start_engine(
                [*ENGINE_ARGS, "--sim-speed", f"{speed:g}", "--max-running-requests", str(ns.streams)], model_root=tmp
            )
            try:
                os.sched_setaffinity(eng.pid, {ns.engine_core})
                eng.wait_ready(30)
                before = _pacing(eng)
                cpu0 = _cpu_seconds(eng.pid)
                wall, tokens, chunks = asyncio.run(_drive(eng.url, ns.streams, ns.max_tokens))
                cpu = _cpu_seconds(eng.pid) - cpu0
                after = _pacing(eng)
            finally:
                eng.stop()
            modelled_s = after["modelled_seconds"] - before["modelled_seconds"]
            busy_s = after["busy_wall_seconds"] - before["busy_wall_seconds"]
            steps = int(after["steps"] - before["steps"])
            late = int(after["late_steps"] - before["late_steps"])
            mean_lag = (after["total_lag_ms"] - before["total_lag_ms"]) / max(1, steps)
            achieved = tokens / wall
            modelled = tokens / modelled_s if modelled_s > 0 else float("nan")
            print(
                f"{speed:>6g} {achieved:>15.1f} {modelled:>16.1f} {steady * speed:>15.1f} "
                f"{achieved / modelled:>18.3f} {modelled_s / busy_s:>14.3f} {mean_lag:>12.2f} "
                f"{f'{late}/{steps}':>11} {after['max_lag_ms']:>11.2f} "
                f"{chunks / wall:>9.1f} {cpu / wall:>9.0%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
