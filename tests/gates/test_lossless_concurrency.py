"""The losslessness gate under concurrency, against the simulated engine running as a real process.

The ``kv-overrun`` fault corrupts a request's output only while other requests
decode in the same step (the class of the KV reservation bug): a one-at-a-time
check passes it, the concurrent gate must not.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

from repro_py.endpoint import Endpoint
from repro_py.gates.lossless import PROMPTS, make_reference, request_plan, run_lossless
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags

Factory = Callable[[list[str]], Engine]
TOKENS = 48
DET = ["--enable-deterministic-inference"]  # as a sweep runs every config


def test_prompts_are_many_and_of_mixed_lengths() -> None:
    lengths = sorted(len(text) for _, text in PROMPTS)
    assert len(PROMPTS) >= 16 and len({pid for pid, _ in PROMPTS}) == len(PROMPTS)
    assert lengths[0] < 20 and lengths[-1] > 300  # a few characters up to several hundred


def test_request_plan_repeats_every_prompt_and_fills_two_batches() -> None:
    plan = request_plan(PROMPTS, rounds=2, concurrency=16)
    assert len(plan) == 2 * len(PROMPTS) and plan[: len(PROMPTS)] == list(PROMPTS)
    few = request_plan(PROMPTS[:3], rounds=2, concurrency=16)
    assert len(few) >= 32 and {p for p, _ in few} == {p for p, _ in PROMPTS[:3]}  # rows reused even so
    assert request_plan((), rounds=2, concurrency=16) == []


async def _reference(factory: Factory) -> dict[str, object]:
    base = factory(DET)
    async with aiohttp.ClientSession() as session:
        run = await run_lossless(session, Endpoint(base.url), None, baseline=True, deterministic=True,
                                 max_new_tokens=TOKENS)
    base.stop()
    assert run["passed"] and run["is_reference"], run["reason"]
    assert all(len(ids) == TOKENS for ids in run["output_ids"].values())  # ignore_eos: a fixed length
    return make_reference(run["output_ids"], max_new_tokens=TOKENS, source="baseline", deterministic=True)


async def test_healthy_ddtree_engine_passes_concurrently(engine_factory: Factory) -> None:
    reference = await _reference(engine_factory)
    tree = engine_factory([*ddtree_flags(budget=16, topk=4), *DET])
    async with aiohttp.ClientSession() as session:
        res = await run_lossless(session, Endpoint(tree.url), reference, baseline=False, deterministic=True)
    assert res["passed"], res["reason"]
    assert res["exact_match_rate"] == 1.0 and res["first_divergence"] is None
    assert res["requests"] == 2 * len(PROMPTS) and res["peak_in_flight"] >= 16
    assert all(r["repeats"] == 2 and r["diverging_repeats"] == 0 for r in res["prompts"])


async def test_kv_overrun_passes_one_at_a_time_and_fails_the_concurrent_gate(engine_factory: Factory) -> None:
    reference = await _reference(engine_factory)
    broken = engine_factory([*ddtree_flags(budget=16, topk=4), *DET, "--sim-fault", "kv-overrun"])
    async with aiohttp.ClientSession() as session:
        alone = await run_lossless(session, Endpoint(broken.url), reference, baseline=False, deterministic=True,
                                   concurrency=1, rounds=1)
        assert alone["peak_in_flight"] == 1
        assert alone["passed"], alone["reason"]  # a single-request check cannot see it
        res = await run_lossless(session, Endpoint(broken.url), reference, baseline=False, deterministic=True)
    assert res["passed"] is False
    assert res["peak_in_flight"] >= 16
    assert res["exact_match_rate"] < 0.5 and isinstance(res["first_divergence"], int)
    assert res["verdict"] == "diverged"
    assert "diverge from the baseline reference" in res["reason"] and "at a time" in res["reason"]
    bad = [r for r in res["prompts"] if not r["exact"]]
    assert bad and all(r["diverging_repeats"] >= 1 for r in bad)


async def test_without_a_baseline_a_broken_config_is_not_judged_but_its_repeats_show(engine_factory: Factory) -> None:
    """No reference and a speculative server: never "the reference" (the old gate compared it with itself and
    made it the reference for the configs after it); the rows still show the repeats disagreeing."""
    broken = engine_factory([*ddtree_flags(budget=16, topk=4), *DET, "--sim-fault", "kv-overrun"])
    async with aiohttp.ClientSession() as session:
        res = await run_lossless(session, Endpoint(broken.url), None, baseline=False, deterministic=True,
                                 max_new_tokens=TOKENS)
    assert res["verdict"] == "no_baseline" and res["passed"] is False and res["is_reference"] is False
    assert any(r["diverging_repeats"] for r in res["prompts"])


async def test_bad_concurrency_is_refused() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ValueError, match="concurrency and rounds must be >= 1, got concurrency=0"):
            await run_lossless(session, Endpoint("http://127.0.0.1:9"), None, baseline=True, deterministic=True,
                               concurrency=0)
