"""Sampled requests that carry no seed: every draw is new, yet what one launch draws for a set of requests is the
same on every launch with the same ``--sim-seed`` and config, whatever order concurrency brings the requests in;
two configs, or two seeds, draw independently. (Before, each such request drew fresh randomness, so every sampled
gate on the simulated engine was a new coin toss with a false-alarm rate of 1/1000 per config.)"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp

from repro_py.endpoint import Endpoint
from repro_py.gates.lossless import generate_ids
from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory

PROMPTS = ("The capital city of France is", "Write a haiku about the sea.")
SETTING = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 6, "ignore_eos": True}
DRAWS = 24  # per prompt


async def _samples(url: str, order_seed: int) -> dict[str, list[tuple[int, ...]]]:
    """Every prompt ``DRAWS`` times, 16 at a time, in an order of its own: each prompt's samples, sorted."""
    plan = [p for p in PROMPTS for _ in range(DRAWS)]
    random.Random(order_seed).shuffle(plan)
    gate = asyncio.Semaphore(16)
    async with aiohttp.ClientSession() as session:

        async def one(text: str) -> tuple[int, ...]:
            async with gate:
                ids = await generate_ids(session, Endpoint(url), text, max_new_tokens=6, sampling=SETTING)
                return tuple(ids)

        got = await asyncio.gather(*(one(text) for text in plan))
    out: dict[str, list[tuple[int, ...]]] = {p: [] for p in PROMPTS}
    for text, ids in zip(plan, got, strict=True):
        out[text].append(ids)
    return {p: sorted(v) for p, v in out.items()}


def test_a_launch_draws_the_same_samples_in_any_order_and_each_draw_is_new(
    engine_factory: EngineFactory, tmp_path: Path
) -> None:
    first = engine_factory([*DDTREE_B8, *FAST])
    second = engine_factory([*DDTREE_B8, *FAST], model_root=tmp_path / "elsewhere")  # the model in another directory
    first.wait_ready(timeout=30)
    second.wait_ready(timeout=30)
    drawn = asyncio.run(_samples(first.url, order_seed=1))
    again = asyncio.run(_samples(second.url, order_seed=2))
    assert drawn == again  # another process, model directory and arrival order: the same samples
    for prompt, samples in drawn.items():
        assert len(set(samples)) > DRAWS // 3, (prompt, samples)  # independent draws, not one sample repeated
    later = asyncio.run(_samples(first.url, order_seed=1))  # the same requests again on the same launch: new draws
    assert later != drawn


def test_another_config_or_seed_draws_independently(engine_factory: EngineFactory) -> None:
    tree = engine_factory([*DDTREE_B8, *FAST])
    base = engine_factory(FAST)
    reseeded = engine_factory([*DDTREE_B8, *FAST, "--sim-seed", "7"])
    for eng in (tree, base, reseeded):
        eng.wait_ready(timeout=30)
    drawn = {name: asyncio.run(_samples(eng.url, order_seed=1)) for name, eng in
             (("tree", tree), ("base", base), ("reseeded", reseeded))}  # fmt: skip
    for prompt in PROMPTS:
        tree_s, base_s, reseeded_s = (set(drawn[n][prompt]) for n in ("tree", "base", "reseeded"))
        # the first token of a 6-token sample takes few values; the whole sample shares few of its draws
        assert len(tree_s & base_s) < DRAWS // 2, (prompt, tree_s & base_s)
        assert len(tree_s & reseeded_s) < DRAWS // 2, (prompt, tree_s & reseeded_s)
