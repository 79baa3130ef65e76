"""The tuner against a MEASURED full grid, with random search at the same budget, on the simulated engine.

For each space (three, none of them the space the tuner's settings were chosen
on: ``tests/tune/conftest.py``'s MEDIUM_SPACE, budgets 2..64 x top-K 1..8 x
block 8/16 x window 2048/none) and each objective:

* the **full grid**: every config of the space (and the inventory's current
  config) restarted and measured by the sweep's own loop (``SweepRunner``:
  reconfigure, the bundle's benchmark client, gates), 512 output tokens x 3
  repeats at both objectives' cells in one restart; the current config is
  restarted twice more, so the grid's own between-restart noise is measured.
  The grid's optimum per objective is its best measured config that passed
  the gates: the truth here is what an outsider measures, not a model;
* the **tuner** (``repro_py.tune``'s loop, its default settings) once per seed
  with a restart budget of 30% of the grid's restarts, the grid counting one
  restart per config that differs for the run (configs whose draft window
  covers every token of the run are one config) plus the restore;
* **random search** at the same budget: as many configs as the tuner may
  restart (the restore set aside), drawn uniformly without replacement from the
  space with the seed, the best by the grid's own measurement winning; and its
  expected hit rate over 2000 draws.

A winner is a **hit** when the grid measured it within 2% of the grid's
optimum (the target's own definition, the one counted first). The looser
reading, "within 2% or not distinguishable from the optimum at the tuner's
confidence (90%)" (P(optimum really ahead) < 0.9, from the grid's repeats
pooled over its configs and its measured between-restart noise: the tuner's
noise model fed with the grid's measurements), is counted beside it. So that
neither can pass by construction, the benchmark prints how many configs of
each space each definition counts as a hit, and what random search at the same
budget scores under both.

Engines run as local processes (``LocalProcessReconfigurer``) at
``--speed`` (default 20) with ``--load``/``--warmup`` seconds per restart; each
restart gets its own ``--sim-seed`` (derived from the seed and the config), so
acceptance draws differ between restarts, on top of this machine's timing
noise. Every figure is of this machine running the SIMULATED engine; none
says anything about GPUs. Usage::

    python benchmarks/tune_vs_grid.py [--spaces A,B,C] [--objectives single-stream,throughput]
                                      [--seeds 101,202,303] [--speed 20] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from repro_py.atomicio import write_json_atomic
from repro_py.endpoint import Endpoint
from repro_py.simengine.testing import free_port
from repro_py.sweep import state
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.inventory import Target
from repro_py.sweep.localproc import LocalProcessReconfigurer
from repro_py.sweep.measure import BundleMeasure
from repro_py.sweep.plan import make_plan
from repro_py.sweep.runner import SweepOptions, SweepRunner
from repro_py.tune import verdict
from repro_py.tune.ladder import make_ladder
from repro_py.tune.loop import Budget, TuneLoop
from repro_py.tune.noise import Estimate, NoiseModel, prob_greater
from repro_py.tune.objectives import OBJECTIVE_NAMES, Objective, find_cell, make_objectives, repeat_values
from repro_py.tune.records import RepeatedConfig, split_label
from repro_py.tune.search import Search, SearchSettings
from repro_py.tune.space import Space, load_space

ROOT = Path(__file__).resolve().parents[1]
#: The inventory's current config in every run (inventory/ct200's sweep_default_config).
CURRENT: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}
SPACES: dict[str, dict[str, Any]] = {
    # near the field's default: small budgets, top-K up to 4, block 8, windows shorter than the run and none
    "A": {
        "configs": [{"algorithm": "none"}, CURRENT, {"algorithm": "dflash", "block_size": 8, "window": "none"},
                    {"algorithm": "dflash", "block_size": 16, "window": "none"}],
        "grid": {"algorithm": ["ddtree"], "budget": [3, 4, 5, 6, 8], "topk": [1, 2, 4], "block_size": [8],
                 "window": [128, 512, "none"]},
    },
    # wide budgets, odd top-K caps, both blocks, full draft cache
    "B": {
        "configs": [{"algorithm": "none"}, CURRENT],
        "grid": {"algorithm": ["ddtree"], "budget": [2, 5, 7, 10, 14, 20, 28, 40], "topk": [1, 3, 6],
                 "block_size": [8, 16], "window": ["none"]},
    },
    # chains and small trees, a 1024 window (covers the run: one config with the full cache) and a 64 one
    "C": {
        "configs": [{"algorithm": "none"}, CURRENT],
        "grid": [
            {"algorithm": ["ddtree"], "budget": [1, 2, 3, 4, 6, 9, 12], "topk": [1, 2, 3], "block_size": [8, 16],
             "window": [1024]},
            {"algorithm": ["dflash"], "block_size": [8, 16], "window": [64, 1024, "none"]},
        ],
    },
}  # fmt: skip
EQUAL_WITHIN = 0.02
RANDOM_DRAWS = 2000


class SeededLocal(LocalProcessReconfigurer):
    """The local reconfigurer with a ``--sim-seed`` per (seed, label): run-to-run noise in the acceptance draws."""

    def __init__(self, port: int, seed: str, **kwargs: Any) -> None:
        super().__init__(port, **kwargs)
        self.seed = seed
        self.restarts = 0

    def reconfigure(self, cfg: Any, private_dir: Path, cancel: threading.Event, *, restore: bool = False) -> Any:
        self.restarts += 1
        self.extra_args = ["--sim-seed", str(zlib.crc32(f"{self.seed}:{cfg.label}".encode()))]
        return super().reconfigure(cfg, private_dir, cancel, restore=restore)


def target_for(port: int, space: dict[str, Any]) -> Target:
    return Target(
        inventory=Path("(benchmark)"),
        host="localhost-sim",
        hostvars={"sweep_default_config": CURRENT, "tune_space": space},
        endpoint=Endpoint(f"http://127.0.0.1:{port}"),
        engine_kind="simulated",
    )


def settings_for(objective: Objective, full_tokens: int) -> SearchSettings:
    return SearchSettings(
        objectives=(objective,), ladder=make_ladder(full_tokens=full_tokens), all_objectives=all_objectives()
    )


def all_objectives() -> tuple[Objective, ...]:
    return make_objectives(list(OBJECTIVE_NAMES))


@dataclasses.dataclass
class Grid:
    figures: dict[str, dict[str, list[float]]]  # objective -> label -> repeats (gated configs only)
    noise: dict[str, NoiseModel]  # objective -> the grid's measured noise
    distinct: int
    configs: int
    wall_s: float
    noise_restarts: int

    def estimate(self, objective: str, label: str) -> Estimate | None:
        values = self.figures[objective].get(label) or []
        return self.noise[objective].estimate("full", objective, values)

    def optimum(self, objective: str) -> tuple[str, float]:
        means = {label: statistics.fmean(v) for label, v in self.figures[objective].items() if v}
        best = max(means, key=lambda k: means[k])
        return best, means[best]

    def hit_configs(self, objective: str, confidence: float) -> tuple[int, int, int]:
        """(configs within 2% of the optimum, within 2% or not distinguishable, configs measured)."""
        verdicts = [self.judge(objective, label, confidence) for label in self.figures[objective]]
        return sum(v[1] for v in verdicts), sum(v[2] for v in verdicts), len(verdicts)

    def judge(self, objective: str, label: str | None, confidence: float) -> tuple[float | None, bool, bool]:
        """(winner / optimum - 1, within 2%, a hit: within 2% or not distinguishable from the optimum)."""
        if label is None or not self.figures[objective].get(label):
            return None, False, False
        best, top = self.optimum(objective)
        ratio = statistics.fmean(self.figures[objective][label]) / top - 1.0
        close = ratio >= -EQUAL_WITHIN
        opt, own = self.estimate(objective, best), self.estimate(objective, label)
        assert opt is not None and own is not None
        return ratio, close, close or prob_greater(opt, own) < confidence


def distinct_count(space: Space, objective: Objective, full_tokens: int) -> int:
    search = Search(space, settings_for(objective, full_tokens), NoiseModel())
    return len({search.equivalence_key(c) for c in space.configs})


def run_grid(args: argparse.Namespace, root: Path, name: str, objectives: Sequence[Objective]) -> Grid:
    port = free_port()
    spec = SPACES[name]
    target = target_for(port, spec)
    space = load_space(target)
    bench = BenchPlan(
        contexts=tuple(sorted({o.cell.context for o in objectives})),
        concurrency=tuple(sorted({o.cell.concurrency for o in objectives})),
        repeats=3,
        max_tokens=args.max_tokens,
    )
    plan = make_plan(target, list(space.raws), grid_source=f"benchmark space {name}", bench=bench, results_root=root)
    run_dir = state.RunDir(root / f"grid-{name}")
    run_dir.path.mkdir(parents=True)
    write_json_atomic(run_dir.plan, plan.as_dict(run_dir.run_id))
    rec = SeededLocal(port, f"grid-{name}", load_s=args.load, warmup_s=args.warmup, speed=args.speed)
    quiet = Console(stderr=True, quiet=not args.verbose)
    runner = SweepRunner(
        plan, run_dir, rec, BundleMeasure(), bundle=ROOT, options=SweepOptions(restore=True), console=quiet
    )
    current_cfg = plan.default_config
    assert current_cfg is not None
    t0 = time.monotonic()
    try:

        async def grid_then_noise() -> None:
            await runner.run()
            wall[0] = time.monotonic() - t0
            for restart in (2, 3):  # the current config again: the grid's own between-restart noise
                await runner.run_config_and_write(RepeatedConfig.of(current_cfg, restart))

        wall = [0.0]
        asyncio.run(grid_then_noise())
    finally:
        rec.close()
    figures: dict[str, dict[str, list[float]]] = {o.key: {} for o in objectives}
    noise = {o.key: NoiseModel() for o in objectives}
    for doc in run_dir.results():
        label = str(doc["label"])
        base, restart = split_label(label)
        ok = doc.get("status") == "ok" and bool((doc.get("gates") or {}).get("passed"))
        for o in objectives:
            values = repeat_values(find_cell((doc.get("bench") or {}).get("cells") or [], o.cell), "output_tps")
            if base == current_cfg.label and values and doc.get("status") == "ok":
                noise[o.key].observe_restart("full", o.key, restart, values)
            if restart > 1 or not ok or not values:
                continue
            figures[o.key][label] = values
            noise[o.key].observe("full", o.key, label, values)
    distinct = distinct_count(space, objectives[0], args.max_tokens)
    return Grid(figures, noise, distinct, len(space), wall[0], 2)


@dataclasses.dataclass
class TunerRow:
    winner: str | None
    restarts: int
    wall_s: float
    replace: bool | None
    between_cv: float


def run_tuner(
    args: argparse.Namespace, root: Path, name: str, objective: Objective, *, seed: int, max_restarts: int
) -> TunerRow:
    port = free_port()
    target = target_for(port, SPACES[name])
    space = load_space(target)
    settings = settings_for(objective, args.max_tokens)
    bench = BenchPlan(
        contexts=(objective.cell.context,),
        concurrency=(objective.cell.concurrency,),
        repeats=settings.final.repeats,
        max_tokens=settings.final.max_tokens,
    )
    plan = make_plan(target, list(space.raws), grid_source=f"benchmark space {name}", bench=bench, results_root=root)
    search = Search(space, settings, NoiseModel(), default=plan.default_config)
    run_dir = state.RunDir(root / f"tune-{name}-{objective.key}-{seed}")
    run_dir.path.mkdir(parents=True)
    write_json_atomic(run_dir.plan, plan.as_dict(run_dir.run_id))
    rec = SeededLocal(port, f"{name}-{objective.key}-{seed}", load_s=args.load, warmup_s=args.warmup, speed=args.speed)
    loop = TuneLoop(
        plan,
        search,
        run_dir,
        rec,
        BundleMeasure(),
        bundle=ROOT,
        budget=Budget(max_restarts=max_restarts),
        console=Console(stderr=True, quiet=not args.verbose),
    )
    t0 = time.monotonic()
    try:
        outcome = asyncio.run(loop.run())
    finally:
        rec.close()
    (won,) = search.winners()
    versus = verdict.versus_current(search, won)
    return TunerRow(
        won.label,
        outcome.restarts,
        time.monotonic() - t0,
        None if versus is None else versus.replace,
        search.noise.between().cv,
    )


def random_search(grid: Grid, space_labels: list[str], objective: str, n: int, rng: random.Random) -> str | None:
    """The best (by the grid's measurement) of ``n`` configs drawn without replacement; failed ones never win."""
    drawn = rng.sample(space_labels, min(n, len(space_labels)))
    measured = [(statistics.fmean(grid.figures[objective][lb]), lb) for lb in drawn if grid.figures[objective].get(lb)]
    return max(measured)[1] if measured else None


def yes(value: bool) -> str:
    return "yes" if value else "NO"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spaces", default="A,B,C")
    ap.add_argument("--objectives", default="single-stream,throughput")
    ap.add_argument("--seeds", default="101,202,303")
    ap.add_argument("--speed", type=float, default=20.0, help="simulated engine --sim-speed (default 20)")
    ap.add_argument("--load", type=float, default=1.0, help="simulated load seconds (default 1)")
    ap.add_argument("--warmup", type=float, default=0.5, help="simulated warmup seconds (default 0.5)")
    ap.add_argument("--max-tokens", type=int, default=512, help="output tokens at the full rung (default 512)")
    ap.add_argument("--budget-share", type=float, default=0.30, help="tuner restart budget / grid restarts")
    ap.add_argument("--keep", type=Path, help="keep the run directories here")
    ap.add_argument("--json", type=Path, help="write every row as JSON here")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    names = [s.strip() for s in args.spaces.split(",") if s.strip()]
    objectives = make_objectives([o.strip() for o in args.objectives.split(",") if o.strip()])
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    confidence = NoiseModel().confidence
    root = Path(tempfile.mkdtemp(prefix="tune-vs-grid-"))
    t_all = time.monotonic()
    print(
        f"SIMULATED engine x{args.speed:g}, load {args.load:g} s + warmup {args.warmup:g} s per restart; "
        f"spaces {', '.join(names)}; objectives {', '.join(o.key for o in objectives)}; seeds {seeds}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    table = [
        "| space | objective | run | winner | grid tok/s | vs grid optimum | within 2% | or n.d. | restarts "
        "| restart ratio | wall s | random-search winner | vs grid optimum | within 2% | or n.d. |",
        "|---|---|---|---|---:|---:|---|---|---:|---:|---:|---|---:|---|---|",
    ]
    for name in names:
        grid = run_grid(args, root, name, objectives)
        grid_restarts = grid.distinct + 1
        budget = math.floor(args.budget_share * grid_restarts)
        labels = list(load_space(target_for(0, SPACES[name])).by_label())
        print(
            f"space {name}: {grid.configs} configs ({grid.distinct} distinct for these runs), "
            f"grid {grid.wall_s:.0f} s; "
            f"between restarts (grid, current config x3): "
            + ", ".join(f"{o.key} {grid.noise[o.key].between().text()}" for o in objectives)
            + f"; tuner budget {budget} restarts",
            flush=True,
        )
        for obj in objectives:
            best, top = grid.optimum(obj.key)
            close_n, nd_n, measured_n = grid.hit_configs(obj.key, confidence)
            table.append(
                f"| {name} | {obj.key} | full grid | {best} | {top:.1f} | +0.0% | {close_n} of {measured_n} configs | "
                f"{nd_n} of {measured_n} configs | {grid_restarts} | 1.000 | {grid.wall_s:.0f} | | | | |"
            )
            draws = [
                grid.judge(obj.key, random_search(grid, labels, obj.key, budget - 1, random.Random(i)), confidence)
                for i in range(RANDOM_DRAWS)
            ]
            expected = (statistics.fmean(d[1] for d in draws), statistics.fmean(d[2] for d in draws))
            for seed in seeds:
                tuned = run_tuner(args, root, name, obj, seed=seed, max_restarts=budget)
                ratio, close, hit = grid.judge(obj.key, tuned.winner, confidence)
                rand = random_search(grid, labels, obj.key, budget - 1, random.Random(f"{name}:{obj.key}:{seed}"))
                r_ratio, r_close, r_hit = grid.judge(obj.key, rand, confidence)
                measured = statistics.fmean(grid.figures[obj.key].get(tuned.winner or "", [0.0]) or [0.0])
                table.append(
                    f"| {name} | {obj.key} | tuner seed {seed} | {tuned.winner} | {measured:.1f} | {pct(ratio)} | "
                    f"{yes(close)} | {yes(hit)} | {tuned.restarts} | {tuned.restarts / grid_restarts:.3f} | "
                    f"{tuned.wall_s:.0f} | {rand} | {pct(r_ratio)} | {yes(r_close)} | {yes(r_hit)} |"
                )
                rows.append(
                    {
                        "space": name, "objective": obj.key, "seed": seed, "winner": tuned.winner,
                        "vs_optimum": ratio, "within_2pct": close, "hit": hit, "restarts": tuned.restarts,
                        "grid_restarts": grid_restarts, "wall_s": tuned.wall_s, "grid_wall_s": grid.wall_s,
                        "write_back": tuned.replace, "between_cv": tuned.between_cv, "random_winner": rand,
                        "random_vs_optimum": r_ratio, "random_within_2pct": r_close, "random_hit": r_hit,
                        "random_expected_within_2pct": expected[0], "random_expected_hit_rate": expected[1],
                        "optimum": best, "optimum_tps": top, "hit_configs": [close_n, nd_n, measured_n],
                    }
                )  # fmt: skip
                print(table[-1], flush=True)
            print(
                f"  random search at {budget - 1} configs, {obj.key}: expected within 2% {expected[0]:.0%}, "
                f"within 2% or n.d. {expected[1]:.0%}",
                flush=True,
            )
    print()
    print("\n".join(table))
    n = len(rows)
    print()
    print(
        f"tuner: within 2% of the grid's optimum {sum(r['within_2pct'] for r in rows)}/{n}; within 2% or not "
        f"distinguishable from it at {confidence:.0%}: {sum(r['hit'] for r in rows)}/{n}"
    )
    groups = {(r["space"], r["objective"]): r for r in rows}
    print(
        f"random search at the same budget: within 2% {sum(r['random_within_2pct'] for r in rows)}/{n}, or n.d. "
        f"{sum(r['random_hit'] for r in rows)}/{n}; expected over {RANDOM_DRAWS} draws (within 2% / or n.d.): "
        + ", ".join(
            f"{s} {o} {r['random_expected_within_2pct']:.0%} / {r['random_expected_hit_rate']:.0%}"
            for (s, o), r in groups.items()
        )
    )
    ratios = [r["restarts"] / r["grid_restarts"] for r in rows]
    walls = [r["wall_s"] / r["grid_wall_s"] for r in rows]
    print(
        f"restarts / grid's: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}; wall / grid's "
        f"(the grid measured both objectives per restart): median {statistics.median(walls):.3f}, max {max(walls):.3f}"
    )
    print(
        f"write-back proposed (winner ahead of the current config at {confidence:.0%}, or the current one failed): "
        f"{sum(1 for r in rows if r['write_back'])}/{n}; total wall {time.monotonic() - t_all:.0f} s"
    )
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "table": table})
    if args.keep:
        shutil.copytree(root, args.keep, dirs_exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
