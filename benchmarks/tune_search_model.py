"""The tuner's search against the previous release's and random search, on the performance model, many seeds.

Each run is the tuner's own loop (``repro_py.tune.loop.TuneLoop``: proposals, the
racing ladder, the gates, the budget) measuring through ``tests/tune/fakes.py``'s
``ModelMeasure``: no processes, each repeat drawn from the simulated engine's
performance model with normal noise (``--cv`` per repeat at 512 tokens, ``--restart-cv``
per restart), the model read over the generation as the simulated engine runs it (a
draft window the sequence outgrows costs acceptance; ``--at-prompt``: read at the
prompt's length, as this harness did before, where such a window reads as a full
cache). It answers in seconds what ``benchmarks/tune_vs_grid.py`` answers in an hour,
and is the tool the search's settings were chosen with: the trust radius and the
surrogate's constant mean on spaces A, B and C (read at the prompt), seeds 0-19, at the
default noise. A search
tuned that way is judged on other spaces and seeds, and on a measured grid, by
``tune_vs_grid.py`` (docs/tune.md).

Per space and objective, side by side in one run on the same seeds:

* **tuner**: this release's search (a trust region around the winner so far, a
  surrogate with a constant mean, new settings first, each at the top-K the
  fewest measured configs have; a local check at the winner's neighbour the
  surrogate knows least;
  confirmation restarts with restarts no new candidate can use);
* **tuner: one it could crown**: the runs where the tuner measured a config within the hit band
  to the full rung and gated it, crowned or not (what it found; the tuner column is what it crowned);
* **previous**: the previous release's (``SearchSettings.previous_release``:
  new settings at the top-K the surrogate's mean puts first, a local check at
  the neighbour with the highest upper bound);
* **random**: as many configs as the tuner's budget less the restore, drawn without
  replacement, each measured once with the same noise, the best measured winning;
* **random, same obligations**: random search that spends the budget as the tuner must before
  it draws: the restore, the autoregressive baseline (the lossless reference no winner can be
  gated without) and the inventory's current config (what a write-back is judged against), the
  rest drawn as above from the other configs; the baseline and the current config can win too;
* **grid**: every config of the space measured once with the same noise, the best measured
  winning (at more than three times the budget): how much of the target the noise leaves
  when nothing is left unmeasured, a reference level for the searches (not a bound).

The budget is ``--budget-share`` of the space's configs that differ for the run plus
the restore (the benchmark's rule); a hit is a winner whose model figure is within
``--within`` of the model's best. Every figure is of the performance model (SIMULATED);
none says anything about GPUs, nor about a real engine's landscape. Usage::

    python benchmarks/tune_search_model.py [--spaces A,B,C] [--objectives single-stream,throughput]
                                           [--seeds 20] [--first-seed 0] [--cv 0.05] [--restart-cv 0.02]
                                           [--at-prompt]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.tune_vs_grid import CURRENT, SPACES
from repro_py.tune import proposals, verdict
from repro_py.tune.budget import Budget
from tests.tune.conftest import make_loop
from tests.tune.fakes import ModelMeasure, true_tps, true_tps_over_generation

CELLS = {"single-stream": (60, 1), "throughput": (60, 32)}


def tuner_winner(
    root: Path, space: dict[str, object], objective: str, seed: int, args: argparse.Namespace, *, previous: bool
) -> tuple[str | None, int, int, set[str]]:
    """(winner, restarts made, budget, the configs it could have crowned: measured to the full rung and gated) of
    one tuning run on the model."""
    measure = ModelMeasure(seed, cv_at_512=args.cv, restart_cv=args.restart_cv, over_generation=not args.at_prompt)
    probe = make_loop(root, space, (objective,), measure=measure, default=CURRENT, run=f"probe-{seed}",
                      lossless_mode="shared")  # fmt: skip
    distinct = len({proposals.equivalence_key(probe.search, c) for c in probe.search.space.configs})
    budget = math.floor(args.budget_share * (distinct + 1))
    loop = make_loop(root, space, (objective,), measure=measure, default=CURRENT, budget=Budget(max_restarts=budget),
                     run=f"{'previous' if previous else 'tuner'}-{seed}", lossless_mode="shared")  # fmt: skip
    if previous:
        loop.search.settings = loop.search.settings.previous_release()
    outcome = asyncio.run(loop.run())
    (won,) = verdict.winners(loop.search)
    (obj,) = loop.search.settings.objectives
    return won.label, outcome.restarts, budget, {rec.cfg.label for rec, _ in loop.search.ranked(obj)}


def random_winner(
    truth: dict[str, float], n: int, seed: int, args: argparse.Namespace, *, first: tuple[str, ...] = ()
) -> str:
    """The best measured of ``first`` and ``n`` configs drawn from the others, each measured once."""
    rng = random.Random(f"random:{seed}")
    others = [lb for lb in sorted(truth) if lb not in first]
    drawn = [*first, *rng.sample(others, max(0, min(n, len(others))))]
    per_repeat = args.cv / math.sqrt(3)  # three repeats at the full length
    measured = {lb: truth[lb] * (1 + rng.gauss(0, args.restart_cv)) * (1 + rng.gauss(0, per_repeat)) for lb in drawn}
    return max(measured, key=lambda lb: measured[lb])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spaces", default="A,B,C", help=f"of benchmarks/tune_vs_grid.py: {', '.join(SPACES)}")
    ap.add_argument("--objectives", default="single-stream,throughput")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--cv", type=float, default=0.05, help="relative noise of one repeat at 512 tokens")
    ap.add_argument("--restart-cv", type=float, default=0.02, help="relative offset of one restart")
    ap.add_argument("--budget-share", type=float, default=0.30)
    ap.add_argument("--within", type=float, default=0.02)
    ap.add_argument(
        "--at-prompt", action="store_true",
        help="read the model at the prompt's length (the harness before this release: a draft window the sequence "
        "outgrows reads as a full cache) instead of over the generation, as the simulated engine runs it",
    )  # fmt: skip
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.spaces.split(",") if s.strip()]
    unknown = [n for n in names if n not in SPACES]
    if unknown:
        ap.error(f"--spaces {','.join(unknown)} not known; allowed: {', '.join(SPACES)}")
    objectives = [o.strip() for o in args.objectives.split(",") if o.strip()]
    if bad := [o for o in objectives if o not in CELLS]:
        ap.error(f"--objectives {','.join(bad)} not known; allowed: {', '.join(CELLS)}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(
        f"SIMULATED (the performance model, no engine): noise {args.cv:.0%} per repeat, {args.restart_cv:.0%} per "
        f"restart; seeds {seeds.start}..{seeds.stop - 1}; a hit: within {args.within:.0%} of the model's best "
        + ("at the prompt's length" if args.at_prompt else "over the generation")
    )
    print("| space | objective | budget | tuner | tuner: one it could crown | previous | random "
          "| random, same obligations | grid (every config once) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    arms = ("tuner", "found", "previous", "random", "obliged", "grid")
    totals = dict.fromkeys(arms, 0)
    runs = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for objective in objectives:
                hits = dict.fromkeys(arms, 0)
                budget = 0
                for seed in seeds:
                    root = Path(tmp) / f"{name}-{objective}-{seed}"
                    root.mkdir()
                    won, _, budget, could = tuner_winner(root, SPACES[name], objective, seed, args, previous=False)
                    old, _, _, _ = tuner_winner(root, SPACES[name], objective, seed, args, previous=True)
                    probe = make_loop(root, SPACES[name], (objective,), default=CURRENT, run="truth")
                    full = probe.search.settings.final.max_tokens
                    truth = {
                        c.label: true_tps(c, *CELLS[objective]) if args.at_prompt
                        else true_tps_over_generation(c, *CELLS[objective], full)
                        for c in probe.search.space.configs
                    }  # fmt: skip
                    best = max(truth.values())
                    rand = random_winner(truth, budget - 1, seed, args)
                    baseline = next(c.label for c in probe.search.space.configs if c.spec.algorithm == "none")
                    assert probe.search.default is not None
                    obliged = random_winner(truth, budget - 3, seed, args, first=(baseline, probe.search.default.label))
                    grid = random_winner(truth, len(truth), seed, args)
                    picks = (("tuner", won), ("previous", old), ("random", rand), ("obliged", obliged), ("grid", grid))
                    for arm, label in picks:
                        hits[arm] += label is not None and truth[label] >= (1 - args.within) * best
                    hits["found"] += any(truth.get(label, 0.0) >= (1 - args.within) * best for label in could)
                n = len(seeds)
                print(f"| {name} | {objective} | {budget} | " + " | ".join(f"{hits[a]}/{n}" for a in arms) + " |",
                      flush=True)  # fmt: skip
                for arm in totals:
                    totals[arm] += hits[arm]
                runs += n
    print(f"\nwithin {args.within:.0%} of the model's best: tuner {totals['tuner']}/{runs} (one it could crown, "
          f"measured to the full rung and gated, in {totals['found']}/{runs}), previous "
          f"{totals['previous']}/{runs}, random {totals['random']}/{runs}, random with the tuner's obligations "
          f"{totals['obliged']}/{runs}; the grid, every config once "
          f"{totals['grid']}/{runs}; {time.monotonic() - t0:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
