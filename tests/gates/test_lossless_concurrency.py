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
from repro_py.simengine.testing import Engine, ddtree_flags

Factory = Callable[[list[str]], Engine]
TOKENS = 48


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
    base = factory([])
    async with aiohttp.ClientSession() as session:
        run = await run_lossless(session, Endpoint(base.url), None, max_new_tokens=TOKENS)
    base.stop()
    assert run["passed"] and run["is_reference"], run["reason"]
    return make_reference(run["output_ids"], max_new_tokens=TOKENS, source="baseline")


async def test_healthy_ddtree_engine_passes_concurrently(engine_factory: Factory) -> None:
    reference = await _reference(engine_factory)
    tree = engine_factory(ddtree_flags(budget=16, topk=4))
    async with aiohttp.ClientSession() as session:
        res = await run_lossless(session, Endpoint(tree.url), reference)
    assert res["passed"], res["reason"]
    assert res["exact_match_rate"] == 1.0 and res["first_divergence"] is None
    assert res["requests"] == 2 * len(PROMPTS) and res["peak_in_flight"] >= 16
    assert all(r["repeats"] == 2 and r["diverging_repeats"] == 0 for r in res["prompts"])


async def test_kv_overrun_passes_one_at_a_time_and_fails_the_concurrent_gate(engine_factory: Factory) -> None:
    reference = await _reference(engine_factory)
    broken = engine_factory([*ddtree_flags(budget=16, topk=4), "--sim-fault", "kv-overrun"])
    async with aiohttp.ClientSession() as session:
        alone = await run_lossless(session, Endpoint(broken.url), reference, concurrency=1, rounds=1)
        assert alone["peak_in_flight"] == 1
        assert alone["passed"], alone["reason"]  # a single-request check cannot see it
        res = await run_lossless(session, Endpoint(broken.url), reference)
    assert res["passed"] is False
    assert res["peak_in_flight"] >= 16
    assert res["exact_match_rate"] < 0.5 and isinstance(res["first_divergence"], int)
    assert "diverge from the reference" in res["reason"] and "at a time" in res["reason"]
    bad = [r for r in res["prompts"] if not r["exact"]]
    assert bad and all(r["diverging_repeats"] >= 1 for r in bad)


async def test_kv_overrun_in_the_reference_run_is_caught_by_the_repeats(engine_factory: Factory) -> None:
    """With no reference (the first config of a run), the repeats of each prompt must agree."""
    broken = engine_factory([*ddtree_flags(budget=16, topk=4), "--sim-fault", "kv-overrun"])
    async with aiohttp.ClientSession() as session:
        res = await run_lossless(session, Endpoint(broken.url), None, max_new_tokens=TOKENS)
    assert res["is_reference"] and res["passed"] is False
    assert "differ between their repeats" in res["reason"]


async def test_bad_concurrency_is_refused() -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(ValueError, match="concurrency and rounds must be >= 1, got concurrency=0"):
            await run_lossless(session, Endpoint("http://127.0.0.1:9"), None, concurrency=0)
