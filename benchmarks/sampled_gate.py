"""The sampled gate on simulated engines: its false alarms, its detections, its cost.

One baseline engine gives the reference (its samples at the gate's setting), then, ``--trials``
times each, with a fresh reference every trial:

- a healthy DDTree b8 t4 engine: the share of trials the gate fails is its false-alarm rate
  (at most alpha = 0.001 by construction; the p-values' spread is printed too, since with few
  trials a rate of 0 says little on its own);
- the same engine with the ``bonus-unadjusted`` fault (the bonus token drawn from the whole
  target distribution): the share of trials the gate catches it;
- the gate's cost: wall seconds here, and the engine's modelled seconds on CT200 (the simulated
  engine paces every step by the CT200 model; ``sim.pacing.modelled_seconds`` x speed), i.e.
  what the gate's generations would take on the field host per config.

SIMULATED throughout: the distribution and the fault are the simulated engine's. Usage::

    python benchmarks/sampled_gate.py [--trials 20] [--speed 100]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repro_py.endpoint import Endpoint
from repro_py.gates import sampled
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import EngineGroup, ddtree_flags


def modelled_s(eng: Engine, speed: float) -> float:
    return float(eng.get_json("/server_info")["sim"]["pacing"]["modelled_seconds"]) * speed


async def gate(eng: Engine, reference: dict[str, Any] | None, baseline: bool = False) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        return await sampled.run_sampled(session, Endpoint(eng.url), reference, baseline=baseline)


async def run(trials: int, speed: float) -> None:
    fast = ["--sim-load-seconds", "0", "--sim-warmup-seconds", "0", "--sim-speed", str(speed)]
    models = Path(tempfile.mkdtemp(prefix="sampled-gate-"))
    group = EngineGroup(models, fast)
    try:
        base = group.start([])
        healthy = group.start(ddtree_flags())
        faulty = group.start([*ddtree_flags(), "--sim-fault", "bonus-unadjusted"])
        p_healthy: list[float] = []
        p_faulty: list[float] = []
        wall: list[float] = []
        model: list[float] = []
        for trial in range(trials):
            first = await gate(base, None, baseline=True)
            reference = sampled.make_reference(first, source="baseline")
            before, t0 = modelled_s(healthy, speed), time.monotonic()
            good = await gate(healthy, reference)
            wall.append(time.monotonic() - t0)
            model.append(modelled_s(healthy, speed) - before)
            bad = await gate(faulty, reference)
            p_healthy.append(float(good["p_value"]))
            p_faulty.append(float(bad["p_value"]))
            print(f"trial {trial + 1:>3}: healthy p={good['p_value']:.4f} {good['verdict']:<20} "
                  f"faulty p={bad['p_value']:.4f} {bad['verdict']}", flush=True)
        n = len(p_healthy)
        alarms = sum(p <= sampled.ALPHA for p in p_healthy)
        caught = sum(p <= sampled.ALPHA for p in p_faulty)
        print(f"\nsetting {first['setting']}, {sampled.DEFAULT_SAMPLES} samples x {len(sampled.PROMPTS)} prompts, "
              f"alpha {sampled.ALPHA}, {sampled.PERMUTATIONS} permutations (SIMULATED)")
        low, half = sum(p <= 0.1 for p in p_healthy), sum(p <= 0.5 for p in p_healthy)
        print(f"healthy DDTree b8 t4: {alarms}/{n} false alarms; p-values: median {statistics.median(p_healthy):.3f}, "
              f"share <= 0.1: {low}/{n}, share <= 0.5: {half}/{n}")
        print(f"bonus-unadjusted fault: caught {caught}/{n}; largest p {max(p_faulty):.4f}")
        print(f"cost per config: {statistics.median(wall):.1f} s wall here (speed {speed:g}, the test included); "
              f"{statistics.median(model):.1f} s of modelled CT200 engine time")
    finally:
        group.stop_all()
        shutil.rmtree(models, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--speed", type=float, default=100.0)
    args = parser.parse_args(argv)
    asyncio.run(run(args.trials, args.speed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
