"""Acceptance length under sampling in the simulated engine: the model, its sources, and a measurement.

Prints:

1. every published figure the model is fitted to (DFlash, DDTree and EAGLE-3 papers: acceptance
   length tau at T = 0 and T = 1, the same model and task) beside the model's T = 1 value, with
   the relative error and the source (paper, table, row, column);
2. each drafter family's constant: the one in the code and the minimax fit recomputed here;
3. the acceptance length of each config of the shipped CT200 grid (and a plain DFLASH chain) at
   T = 0 (greedy), 0.7 and 1.0 from the model (context 60), the closing figures;
4. with ``--measure``: the same configs measured through a simulated engine (the benchmark's own
   counter-derived acceptance, ``repro_py.bench``) at each temperature, beside the model.

The model is SIMULATED: fitted to other models' figures (Qwen3, LLaMA-3.1, Vicuna), applied to
the engine's Kimi K2.6 calibration; T = 0.7 is interpolated (no paper reports it). Usage::

    python benchmarks/simengine_sampled_acceptance.py [--measure] [--tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from repro_py import spec_config
from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.endpoint import Endpoint
from repro_py.simengine import accept_sampling, perf_model
from repro_py.simengine.process import start_engine

ROOT = Path(__file__).resolve().parents[1]
TEMPERATURES = (0.0, 0.7, 1.0)
CHAIN = {"algorithm": "dflash", "block_size": 8, "window": 2048}


def grid() -> list[dict[str, object]]:
    doc = yaml.safe_load((ROOT / "inventory/ct200/group_vars/all/sweep.yml").read_text())
    return [c for c in [*doc["sweep_grid"], CHAIN] if c.get("algorithm") != "none"]


def model_config(cfg: spec_config.SpecConfig) -> perf_model.ModelConfig:
    return perf_model.ModelConfig(mode=cfg.algorithm, block_size=cfg.block_size or 8, budget=cfg.budget,
                                  topk=cfg.topk, window=cfg.window)  # fmt: skip


def published() -> None:
    print("1. Published acceptance lengths (tau) at T=0 and T=1, and the model's T=1 value for the T=0 one")
    print(f"{'figure':<38} {'family':<7} {'D':>3} {'T=0':>6} {'T=1':>6} {'model':>6} {'err':>6}  source")
    for fig in accept_sampling.PUBLISHED:
        model = accept_sampling.modelled(fig)
        err = 100.0 * (model - fig.sampled) / fig.sampled
        print(f"{fig.name:<38} {fig.family:<7} {fig.depth:>3} {fig.greedy:>6.2f} {fig.sampled:>6.2f} {model:>6.2f} "
              f"{err:>5.1f}%  {fig.source}")
    print("\n2. Per-depth factor at T=1 per family (code; minimax fit recomputed: largest relative error)")
    for family in accept_sampling.FAMILIES:
        decay, worst = accept_sampling.minimax_decay(family)
        code = accept_sampling.DECAY[family]
        print(f"{family:<7} code {code:.3f}   fit {decay:.3f} (largest error {100 * worst:.1f}%)")


def closing() -> list[spec_config.SpecConfig]:
    configs = [spec_config.validate(c) for c in grid()]
    print("\n3. Acceptance length per config from the simulated model (context 60), SIMULATED")
    print(f"{'config':<28} {'greedy':>7} {'T=0.7':>7} {'T=1.0':>7} {'T=1/greedy':>11}")
    for cfg in configs:
        values = [perf_model.accept_length(model_config(cfg), 60, t) for t in TEMPERATURES]
        print(f"{cfg.label:<28} {values[0]:>7.2f} {values[1]:>7.2f} {values[2]:>7.2f} {values[2] / values[0]:>11.3f}")
    print("sources: greedy from the CT200 calibration (docs/simengine.md); T>0 by the per-depth factors above "
          "(DFLASH chain: 'dflash', DDTree: 'ddtree'); T=0.7 interpolated as factor**0.7")
    return configs


async def measure(configs: list[spec_config.SpecConfig], tokens: int) -> None:
    print(f"\n4. Measured through the simulated engine (counter-derived, 8 streams x {tokens} tokens, context 60)")
    print(f"{'config':<28} " + " ".join(f"{'T=' + str(t):>14}" for t in TEMPERATURES) + "   (measured / model)")
    with tempfile.TemporaryDirectory(prefix="sampled-accept-") as root:
        for cfg in configs:
            flags = spec_config.to_engine_flags(cfg, drafter_path=None)
            eng = start_engine([*flags, "--sim-speed", "50", "--enable-metrics", "--sim-load-seconds", "0.2",
                                "--sim-warmup-seconds", "0"], model_root=root)  # fmt: skip
            try:
                eng.wait_ready(60)
                cells = []
                for t in TEMPERATURES:
                    settings = BenchSettings(contexts=(60,), concurrency=(8,), repeats=1, max_tokens=tokens, warmup=1,
                                             temperature=t, top_p=1.0)  # fmt: skip
                    result = await run_matrix(Endpoint(eng.url), settings)
                    got = result["cells"][0]["median"]["accept_length"]
                    want = perf_model.accept_length(model_config(cfg), 60, t)
                    cells.append(f"{got:.2f}/{want:.2f}")
                print(f"{cfg.label:<28} " + " ".join(f"{c:>14}" for c in cells))
            finally:
                eng.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="also measure each config through a simulated engine")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per stream when measuring (default 256)")
    args = parser.parse_args(argv)
    published()
    configs = closing()
    if args.measure:
        asyncio.run(measure(configs, args.tokens))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
