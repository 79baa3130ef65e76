"""Sweep overhead: how much wall time the sweep adds around engine loads and measurements.

Runs a real 6-config sweep (the sweep loop of ``repro_py.sweep``, the bundle's
benchmark and gates, result writes, lossless reference, restore of the
default config, report with plots, run manifest) against the simulated
engine, started as a local process per config by
``repro_py.sweep.localproc.LocalProcessReconfigurer`` (no Ansible, no
systemd: this measures the sweep's own overhead, not the play's). Prints::

    wall time                    from the first restart to the manifest written
    sum of engine load times     per restart (a config's production one and its lossless gate's own, with
                                 --lossless-restart separate, the default; and the final restore): start -> ready
    sum of benchmark times       per config: run_matrix + gates, on whichever restart (the measurement itself)
    ratio                        wall / (loads + benchmarks); target <= 1.10

and where the rest went (stops, server info, health checks, writes, report).
Figures are of this machine running the simulated engine; they say nothing
about GPUs. Usage::

    python benchmarks/sweep_overhead.py [--speed 10] [--load 2] [--warmup 1] [--keep DIR]
    python benchmarks/sweep_overhead.py --from-run results/<run-id>   # e.g. a run through the Ansible play
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from repro_py import manifest
from repro_py.atomicio import write_json_atomic
from repro_py.endpoint import Endpoint
from repro_py.report.render import build_report
from repro_py.simengine.process import free_port
from repro_py.sweep import state
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.inventory import Target
from repro_py.sweep.localproc import LocalProcessReconfigurer
from repro_py.sweep.measure import BundleMeasure
from repro_py.sweep.plan import make_plan
from repro_py.sweep.runner import SweepOptions, SweepRunner

GRID: list[dict[str, object]] = [
    {"algorithm": "none"},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
    {"algorithm": "ddtree", "budget": 12, "topk": 6, "window": 2048, "block_size": 8},
    {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048, "block_size": 8},
    {"algorithm": "ddtree", "budget": 4, "topk": 4, "window": "none", "block_size": 8},
    {"algorithm": "dflash", "window": 2048, "block_size": 8},
]
DEFAULT: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}


#: the measurement itself, per config: the benchmark and every gate, on whichever restart it ran
MEASURED = ("bench_s", "gates_s", "lossless_gate_s")


def _timed(timing: object, *keys: str) -> float:
    """The sum of ``keys`` in a result's ``timing`` (absent: 0)."""
    return sum(float(timing.get(k) or 0.0) for k in keys) if isinstance(timing, dict) else 0.0


def from_run(run_path: Path) -> int:
    """The same ratio from a finished run's files (e.g. one through the Ansible play on the test host)."""
    docs = [json.loads(p.read_text()) for p in sorted((run_path / "configs").glob("*.json"))]
    state_doc = json.loads((run_path / "state.json").read_text())
    restore = state_doc.get("restore") or {}
    walls = sum(float(d.get("wall_s") or 0.0) for d in docs) + float(restore.get("wall_s") or 0.0)
    loads = [float((d.get(block) or {}).get("time_to_ready_s") or 0.0) for d in docs
             for block in ("reconfigure", "lossless_reconfigure")]  # fmt: skip
    loads.append(float(restore.get("time_to_ready_s") or 0.0))
    plays = sum(_timed(d.get("timing"), "reconfigure_s", "lossless_reconfigure_s") for d in docs)
    plays += float(restore.get("wall_s") or 0.0)
    benches = sum(_timed(d.get("timing"), *MEASURED) for d in docs)
    restarted = sum(1 for d in docs if (d.get("reconfigure") or {}).get("changed"))
    print(
        f"sweep overhead from the files of {run_path} (per-config wall times; an interrupted run's pause is not in it)"
    )
    print(
        f"  configs                    {len(docs)} ({restarted} restarted the engine), restore {restore.get('status')}"
    )
    print(f"  sum of config wall times   {walls:8.2f} s  (incl. restore)")
    print(f"  sum of engine load times   {sum(loads):8.2f} s  (time_to_ready_s as the play reports it)")
    print(f"  sum of play wall times     {plays:8.2f} s  (reconfigure plays, incl. restore)")
    print(f"  sum of benchmark times     {benches:8.2f} s  (run_matrix + gates)")
    print(f"  ratio                      {walls / max(sum(loads) + benches, 1e-9):8.3f}    (target <= 1.10)")
    print(f"  ratio with the plays as the load time {walls / max(plays + benches, 1e-9):.3f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-run", type=Path, help="compute the ratio from a finished run directory instead")
    ap.add_argument("--speed", type=float, default=10.0, help="simulated engine --sim-speed (default 10)")
    ap.add_argument("--load", type=float, default=2.0, help="simulated load seconds (default 2, as inventory/local)")
    ap.add_argument("--warmup", type=float, default=1.0, help="simulated warmup seconds (default 1)")
    ap.add_argument("--contexts", type=int, nargs="+", default=[60, 1024])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--lossless-restart", choices=("separate", "shared"), default="separate",
                    help="where the lossless gate runs (default separate: a restart of its own per config)")
    ap.add_argument("--keep", type=Path, help="keep the run directory here (default: a temp dir, removed)")
    args = ap.parse_args()
    if args.from_run:
        return from_run(args.from_run)

    root = Path(tempfile.mkdtemp(prefix="sweep-overhead-"))
    port = free_port()
    target = Target(
        inventory=Path("(benchmark)"),
        host="localhost-sim",
        hostvars={"sweep_default_config": DEFAULT},
        endpoint=Endpoint(f"http://127.0.0.1:{port}"),
        engine_kind="simulated",
    )
    bench = BenchPlan(
        contexts=tuple(args.contexts), concurrency=tuple(args.concurrency), repeats=args.repeats,
        max_tokens=args.max_tokens,
    )  # fmt: skip
    plan = make_plan(target, GRID, grid_source="benchmark", bench=bench, results_root=root,
                     lossless_mode=args.lossless_restart)  # fmt: skip
    run_dir = state.RunDir(root / "overhead")
    run_dir.path.mkdir(parents=True)
    write_json_atomic(run_dir.plan, plan.as_dict(run_dir.run_id))
    rec = LocalProcessReconfigurer(port, load_s=args.load, warmup_s=args.warmup, speed=args.speed)
    runner = SweepRunner(
        plan, run_dir, rec, BundleMeasure(), bundle=Path(__file__).resolve().parents[1],
        options=SweepOptions(restore=True), console=Console(stderr=True),
    )  # fmt: skip
    t0 = time.monotonic()
    try:
        outcome = asyncio.run(runner.run())
        t_report = time.monotonic()
        build_report(run_dir.path)
        manifest.write(run_dir.path)
        wall = time.monotonic() - t0
        report_s = time.monotonic() - t_report
    finally:
        rec.close()

    loads = [_timed(t, "load_s", "lossless_load_s") for t in outcome.timings.values()]
    restore_load = float((outcome.restore or {}).get("time_to_ready_s") or 0.0)
    benches = [_timed(t, *MEASURED) for t in outcome.timings.values()]
    matrix = sum(t.get("bench_s", 0.0) for t in outcome.timings.values())
    gates = sum(_timed(t, "gates_s", "lossless_gate_s") for t in outcome.timings.values())
    reconf = sum(_timed(t, "reconfigure_s", "lossless_reconfigure_s") for t in outcome.timings.values())
    restarts = sum(1 + ("lossless_reconfigure_s" in t) for t in outcome.timings.values())
    sum_load = sum(loads) + restore_load
    sum_bench = sum(benches)
    ratio = wall / (sum_load + sum_bench)
    print("sweep overhead (simulated engine as local processes; LocalProcessReconfigurer, not the Ansible play)")
    print(f"  configs                    {len(outcome.ran)} ran, {len(outcome.failed)} failed, restore "
          f"{(outcome.restore or {}).get('status')}")  # fmt: skip
    print(f"  engine                     --sim-speed {args.speed:g} --sim-load-seconds {args.load:g} "
          f"--sim-warmup-seconds {args.warmup:g}")  # fmt: skip
    print(f"  bench                      contexts {args.contexts} x concurrency {args.concurrency} x "
          f"{args.repeats} repeats, max_tokens {args.max_tokens}; plus gates")  # fmt: skip
    print(f"  wall time                  {wall:8.2f} s")
    print(f"  sum of engine load times   {sum_load:8.2f} s  ({len(loads)} configs in {restarts} restarts + restore "
          f"{restore_load:.2f} s; {plan.lossless_restart.mode})")  # fmt: skip
    print(f"  sum of benchmark times     {sum_bench:8.2f} s  (run_matrix {matrix:.2f} s + gates {gates:.2f} s)")
    print(f"  ratio                      {ratio:8.3f}    (target <= 1.10)")
    print(
        f"  of the rest: restarts incl. stop {reconf - sum(loads):.2f} s beyond load, report+plots+manifest "
        f"{report_s:.2f} s, other {wall - sum_load - sum_bench - (reconf - sum(loads)) - report_s:.2f} s"
    )
    if args.keep:
        shutil.copytree(run_dir.path, args.keep / run_dir.run_id, dirs_exist_ok=True)
        print(f"  run directory kept in {args.keep / run_dir.run_id}")
    shutil.rmtree(root, ignore_errors=True)
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
