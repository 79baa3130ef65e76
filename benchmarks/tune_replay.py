"""The tuner's search replayed on MEASURED grids kept by ``benchmarks/tune_vs_grid.py --keep``, many seeds.

``tune_vs_grid.py`` measures a full grid and a few seeds of the search in an
hour; ``tune_search_model.py`` runs many seeds in seconds, but on the performance
model, whose landscape is not the measured one (on M, N and O at this machine's
noise it scores the search at 112/120 within 2% of the model's best, where the
measured benchmark scored 10/18 within 2% of the measured optimum). This one
sits between them: the tuner's own loop (``TuneLoop``: proposals, the racing
ladder, the gates, the budget) restarts configs of a kept space, and each restart
answers from that space's measured grid:

* at the full rung, each repeat is the config's **first-pass mean** (the grid's
  one restart of it, 3 repeats at 512 tokens) times a restart offset drawn once
  per restart from the grid's measured between-restart noise, times a repeat
  drawn from its pooled per-repeat noise;
* at the shorter rungs (the screen, the confirm rung), the same, times the
  performance model's ratio of that length to the full one for the config (the
  short-output bias of the screen is the model's; the grid measured only the
  full length);
* a config the grid did not pass (its gates) fails its gates here too.

A winner is judged exactly as in ``tune_vs_grid.py`` (``Grid.judge``): within 2%
of the grid's optimum, whose truth near the top is the mean of the leaders'
two re-measures, independent of the first pass this replay draws from. Beside
it, per space and objective: the previous release's search on the same draws,
random search's expected rate at the same budget, the levels of
``tune_vs_grid.py`` with the configs the tuner chooses itself (random search
bound as the tuner is; the truly best located, each measured once as the
replay measures), and the grid's own one-pass pick. Seeds are not independent
runs: each restart is drawn around the same kept grid, so many seeds restart
the same configs in the same order and differ only in those restarts' draws;
the ``distinct runs`` column counts the distinct restart sequences, the number
of trials a row's score rests on. It is a development tool: a space replayed
here is a space the search can be chosen on, so a search chosen with it is
judged again on spaces measured after (``tune_vs_grid.py``). Every figure is of
the SIMULATED engine on this machine; none says anything about GPUs. Usage::

    python benchmarks/tune_replay.py DIR [--spaces M,N,O] [--objectives single-stream,throughput]
                                         [--seeds 20] [--first-seed 0] [--budget-share 0.30]
                                         [--center first|pooled]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from benchmarks.tune_vs_grid import (
    RANDOM_DRAWS,
    SPACES,
    Grid,
    all_objectives,
    best_measured,
    first_pass,
    grid_pick,
    obliged_draw,
    own_choice,
    prepare_run,
    read_grid,
    target_for,
    truly_best,
)  # fmt: skip
from repro_py.sweep import state
from repro_py.tune import proposals, verdict
from repro_py.tune.budget import Budget
from repro_py.tune.loop import TuneLoop
from repro_py.tune.noise import NoiseModel
from repro_py.tune.objectives import Objective, make_objectives
from repro_py.tune.search import Search
from repro_py.tune.space import load_space
from repro_py.tune.sweepio import PlannedConfig
from tests.sweep.conftest import BUNDLE, FakeReconfigurer
from tests.tune.fakes import ModelMeasure, generation


class ReplayMeasure(ModelMeasure):
    """Cells drawn from a kept grid's first pass (see the module's text), built as the benchmark client writes
    them: each repeat spans its time to first token (the config's own, measured by the grid) plus one output
    token every ``t``, so that the ladder's projection of a short rung reads it as it reads the engine."""

    def __init__(
        self, grid: Grid, ttft_ms: dict[str, dict[str, float]], objectives: tuple[Objective, ...], search: Search,
        *, seed: str, full: int, pooled: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(0, restart_cv=0.0)
        self.rng = random.Random(f"replay:{seed}")
        self.grid = grid
        self.ttft = ttft_ms
        self.by_cell = {(o.cell.context, o.cell.concurrency): o.key for o in objectives}
        self.full = full
        kept = {label for labels in grid.first.values() for label in labels}
        self.kept_as = {proposals.equivalence_key(search, c): c.label for c in search.space.configs if c.label in kept}
        self.search = search
        self.gate_fail = {c.label for c in search.space.configs if self.kept_label(c) is None}
        self._restart: dict[str, float] = {}
        self.pooled = pooled

    def kept_label(self, cfg: PlannedConfig) -> str | None:
        return self.kept_as.get(proposals.equivalence_key(self.search, cfg))

    def cell(self, cfg: PlannedConfig, context: int, concurrency: int, repeats: int, max_tokens: int) -> dict[str, Any]:
        objective = self.by_cell[(context, concurrency)]
        label = self.kept_label(cfg)
        first = None if label is None else self.grid.first[objective].get(label)
        if label is None or not first:
            raise KeyError(f"{cfg.label}: not in the kept grid's first pass for {objective}")
        between = math.sqrt(self.grid.between(objective)[0])
        within = math.sqrt(self.grid.within(objective)) * math.sqrt(self.full / max_tokens)
        offset = self._restart.setdefault(cfg.label, self.rng.gauss(0.0, between))
        first_token = self.ttft[objective][label] / 1000.0
        # the full rung's time per output token, from the first pass's mean; at a shorter rung the model's ratio
        # of the time per token over that many tokens to the time over the full rung's
        mean = center(self.grid, objective, label, pooled=self.pooled)
        per_token = (concurrency * self.full / mean - first_token) / (self.full - 1)
        per_token *= generation(cfg, context, concurrency, max_tokens)[0] / generation(
            cfg, context, concurrency, self.full
        )[0]
        accept = None if cfg.spec.algorithm == "none" else generation(cfg, context, concurrency, max_tokens)[1]
        reps: list[dict[str, Any]] = []
        for _ in range(repeats):
            t = per_token / (1.0 + offset) / (1.0 + self.rng.gauss(0.0, within))
            t0 = first_token * (1.0 + self.rng.gauss(0.0, 0.05))
            span = t0 + (max_tokens - 1) * t
            step = t * (accept or 1.0)
            reps.append({
                "output_tps": concurrency * max_tokens / span, "wall_s": span,
                "output_tokens": concurrency * max_tokens, "errors": 0, "ok": concurrency, "requests": concurrency,
                "ttft_ms": {"p50": t0 * 1000, "p90": t0 * 1100, "p99": t0 * 1200},
                "itl_chunk_ms": {"p50": step * 1000, "p90": step * 1100, "p99": step * 1300},
                "itl_token_ms": {"p50": t * 1000, "p90": t * 1050, "p99": t * 1100},
                "accept_length": accept,
            })  # fmt: skip
        values = sorted(r["output_tps"] for r in reps)
        return {
            "context": context, "concurrency": concurrency, "status": "ok", "reason": None, "repeats": reps,
            "median": {"output_tps": values[len(values) // 2], "accept_length": accept},
            "cv": {"output_tps": within}, "noisy": False,
        }  # fmt: skip


def first_ttft(run_dir: state.RunDir, objectives: tuple[Objective, ...]) -> dict[str, dict[str, float]]:
    """Per objective and config, the median time to first token of the grid's first pass (ms)."""
    return {key: {label: statistics.median(values) for label, values in by_label.items()}
            for key, by_label in first_pass(run_dir, objectives, "ttft_p50_ms").items()}  # fmt: skip


def center(grid: Grid, objective: str, label: str, *, pooled: bool) -> float:
    """What a replayed restart of ``label`` is drawn around: its first pass's mean, or with ``pooled`` the mean
    over all its kept restarts."""
    first = grid.first[objective][label]
    runs = [first, *grid.again[objective].get(label, [])] if pooled else [first]
    return statistics.fmean(statistics.fmean(r) for r in runs)


@dataclasses.dataclass(frozen=True)
class Replayed:
    """One replayed run: its winner as the grid labels it, the configs it could have crowned, its confirmations,
    and the labels it restarted, in order (seeds whose runs restart the same configs are one run, drawn again)."""

    winner: str | None
    could: list[str]
    confirmations: int
    restarted: tuple[str, ...]


def replay(
    root: Path, grid: Grid, ttft: dict[str, dict[str, float]], name: str, objective: Objective, *, seed: int,
    budget: int, previous: bool, pooled: bool = False,
) -> Replayed:
    """One run of the tuner's loop on the kept grid of space ``name``."""
    prepared = prepare_run(root, name, objective, seed=seed, max_tokens=512, previous=previous,
                           source="replay of")  # fmt: skip
    search, settings = prepared.search, prepared.search.settings
    # the same draws for both searches: they differ in what they restart, not in what a restart answers
    measure = ReplayMeasure(grid, ttft, (objective,), search, seed=f"{name}-{objective.key}-{seed}",
                            full=settings.final.max_tokens, pooled=pooled)  # fmt: skip
    loop = TuneLoop(prepared.plan, search, prepared.run_dir, FakeReconfigurer(), measure, bundle=BUNDLE,
                    budget=Budget(max_restarts=budget), console=Console(quiet=True))  # fmt: skip
    asyncio.run(loop.run())
    (won,) = verdict.winners(search)
    could = [measure.kept_label(rec.cfg) or rec.base_label for rec, _ in search.ranked(objective)]
    by_label = search.space.by_label()
    winner = None if won.label is None else measure.kept_label(by_label[won.label])
    restarted = tuple(rec.label for rec in sorted(search.records.values(), key=lambda r: r.order))
    return Replayed(winner, could, len(search.confirmations()), restarted)


def measured_pick(grid: Grid, labels: list[str], objective: str, rng: random.Random, *, pooled: bool) -> str | None:
    """The best of ``labels`` by one measurement each: as ``tune_vs_grid.py`` measures it (each config's first
    pass), or, with ``pooled``, a draw around the same center as a replayed restart."""
    if not pooled:
        return best_measured(grid, objective, labels)
    between = math.sqrt(grid.between(objective)[0])
    measured = {}
    for label in labels:
        if first := grid.first[objective].get(label):
            mean = center(grid, objective, label, pooled=True)
            within = math.sqrt(grid.within(objective) / len(first))  # the mean of as many repeats as the grid's
            measured[label] = mean * (1 + rng.gauss(0.0, between)) * (1 + rng.gauss(0.0, within))
    return max(measured, key=lambda lb: measured[lb]) if measured else None


def random_pick(
    grid: Grid, labels: list[str], objective: str, n: int, rng: random.Random, *, pooled: bool
) -> str | None:
    """Random search at ``n`` configs, each drawn config measured once (:func:`measured_pick`)."""
    return measured_pick(grid, rng.sample(labels, min(n, len(labels))), objective, rng, pooled=pooled)


@dataclasses.dataclass(frozen=True)
class Levels:
    """The reference levels of one space and objective, each an expected share of runs within 2% of the optimum:
    random search at the same budget, random search bound as the tuner is (the current config and the tuner's
    own configs drawn), the truly best located (the current config and the true best of as many; a rate with
    ``--center pooled``, 0 or 1 with ``--center first``), and how many configs of its own choosing the tuner can
    restart (:func:`own_configs`)."""

    random: float
    obliged: float
    located: float
    own: int


def levels(grid: Grid, name: str, objective: Objective, budget: int, *, pooled: bool) -> Levels:
    current, others, mine = own_choice(Path(tempfile.gettempdir()), name, objective, budget, grid.per_config,
                                       max_tokens=512)  # fmt: skip
    labels = list(load_space(target_for(0, SPACES[name])).by_label())
    confidence = NoiseModel().confidence

    def rate(pick: Callable[[random.Random], str | None]) -> float:
        return statistics.fmean(grid.judge(objective.key, pick(random.Random(i)), confidence)[1]
                                for i in range(RANDOM_DRAWS))  # fmt: skip

    best = truly_best(grid, objective.key, current, mine)
    return Levels(
        rate(lambda rng: random_pick(grid, labels, objective.key, budget - 1, rng, pooled=pooled)),
        rate(lambda rng: measured_pick(grid, obliged_draw(current, others, mine, rng), objective.key, rng,
                                       pooled=pooled)),
        rate(lambda rng: measured_pick(grid, best, objective.key, rng, pooled=pooled)),
        mine,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kept", type=Path, help="a tune_vs_grid.py --keep directory (DIR/grid-<space>)")
    ap.add_argument("--spaces", default="M,N,O")
    ap.add_argument("--objectives", default="single-stream,throughput")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budget-share", type=float, default=0.30)
    ap.add_argument(
        "--center", choices=("first", "pooled"), default="first",
        help="what a replayed restart is drawn around: the grid's first pass (default; independent of the truth, "
        "which is the leaders' re-measures, so a lucky first pass misleads the replay as it misled the grid's own "
        "pick) or, for a re-measured leader, the mean of all its restarts (closer to what a new restart measures, "
        "but sharing the truth's data: the pick reads optimistic)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.spaces.split(",") if s.strip()]
    missing = [n for n in names if n not in SPACES or not (args.kept / f"grid-{n}").is_dir()]
    if missing:
        ap.error(f"--spaces {','.join(missing)}: no kept grid {args.kept}/grid-<space> of a known space "
                 f"({', '.join(SPACES)})")  # fmt: skip
    objectives = make_objectives([o.strip() for o in args.objectives.split(",") if o.strip()])
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    confidence = NoiseModel().confidence
    print(f"REPLAY of measured grids (SIMULATED engine) in {args.kept}; seeds {seeds.start}..{seeds.stop - 1}; "
          "a hit: within 2% of the grid's optimum")  # fmt: skip
    print("| space | objective | budget | tuner | tuner: one it could crown | distinct runs | confirming | previous | "
          "random (expected) | own configs | random bound as the tuner (expected) | truly best located | "
          "grid's own pick |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    totals = {"tuner": 0, "found": 0, "previous": 0, "random": 0.0, "obliged": 0.0, "located": 0.0, "distinct": 0}
    runs = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            space = load_space(target_for(0, SPACES[name]))
            kept = state.RunDir(args.kept / f"grid-{name}")
            grid = read_grid(kept, space, all_objectives(), 512)
            ttft = first_ttft(kept, all_objectives())
            budget = math.floor(args.budget_share * (grid.per_config * grid.distinct + 1))
            for obj in objectives:
                hits = {"tuner": 0, "found": 0, "previous": 0, "confirming": 0}
                distinct: set[tuple[str, ...]] = set()
                for seed in seeds:
                    root = Path(tmp) / f"{name}-{obj.key}-{seed}"
                    root.mkdir()
                    pooled = args.center == "pooled"
                    run = replay(root, grid, ttft, name, obj, seed=seed, budget=budget, previous=False,
                                 pooled=pooled)  # fmt: skip
                    old = replay(root, grid, ttft, name, obj, seed=seed, budget=budget, previous=True, pooled=pooled)
                    hits["tuner"] += grid.judge(obj.key, run.winner, confidence)[1]
                    hits["previous"] += grid.judge(obj.key, old.winner, confidence)[1]
                    hits["found"] += any(grid.judge(obj.key, lb, confidence)[1] for lb in run.could)
                    hits["confirming"] += run.confirmations > 0
                    distinct.add(run.restarted)
                level = levels(grid, name, obj, budget, pooled=args.center == "pooled")
                own = grid.judge(obj.key, grid_pick(grid, obj.key), confidence)[1]
                n = len(seeds)
                print(f"| {name} | {obj.key} | {budget} | {hits['tuner']}/{n} | {hits['found']}/{n} | "
                      f"{len(distinct)} | {hits['confirming']}/{n} | {hits['previous']}/{n} | {level.random:.0%} | "
                      f"{level.own} | {level.obliged:.0%} | {level.located:.0%} | {'yes' if own else 'NO'} |",
                      flush=True)  # fmt: skip
                for key in ("tuner", "found", "previous"):
                    totals[key] += hits[key]
                totals["random"] += level.random * n
                totals["obliged"] += level.obliged * n
                totals["located"] += level.located * n
                totals["distinct"] += len(distinct)
                runs += n
    print(f"\nwithin 2% of the grid's optimum: tuner {totals['tuner']}/{runs} (one it could crown in "
          f"{totals['found']}/{runs}), previous {totals['previous']}/{runs}, random search expected "
          f"{totals['random']:.0f}/{runs}, bound as the tuner is {totals['obliged']:.0f}/{runs}; the truly best "
          f"located, picked on one measurement each {totals['located']:.0f}/{runs}; "
          f"{time.monotonic() - t0:.0f} s")  # fmt: skip
    print(f"distinct runs (restart sequences) of this search: {totals['distinct']:.0f} of {runs}: seeds whose runs "
          "restart the same configs are one run drawn again, not independent trials")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
