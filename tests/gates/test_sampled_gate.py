"""The sampled gate against simulated engines as real processes: the baseline's samples are the reference, a
healthy DDTree or DFLASH server samples the same distribution, and a DDTree server whose bonus token comes from
the wrong distribution (the bonus-unadjusted fault) fails, while the greedy lossless gate cannot see it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import pytest

from repro_py.endpoint import Endpoint
from repro_py.gates import sampled
from repro_py.gates.lossless import make_reference, run_lossless
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags

Factory = Callable[[list[str]], Engine]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8"]
DET = ["--enable-deterministic-inference"]


async def _run(eng: Engine, reference: Mapping[str, Any] | None, *, baseline: bool = False,
               **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    async with aiohttp.ClientSession() as session:
        return await sampled.run_sampled(session, Endpoint(eng.url), reference, baseline=baseline, **kwargs)


@pytest.fixture
async def baseline_samples(engine_factory: Factory) -> dict[str, Any]:
    base = engine_factory([])
    first = await _run(base, None, baseline=True)
    assert first["passed"] and first["verdict"] == "reference", first["reason"]
    assert first["requests"] == sampled.DEFAULT_SAMPLES * len(sampled.PROMPTS)
    assert all(len(ids) == sampled.DEFAULT_TOKENS for runs in first["samples"].values() for ids in runs)
    base.stop()
    return sampled.make_reference(first, source="baseline")


async def test_healthy_speculative_servers_sample_the_baselines_distribution(
    engine_factory: Factory, baseline_samples: dict[str, Any]
) -> None:
    for flags in (ddtree_flags(), ddtree_flags(budget=16, topk=8), DFLASH):
        eng = engine_factory(flags)
        res = await _run(eng, baseline_samples)
        assert res["passed"] and res["verdict"] == "same_distribution", (flags, res["reason"], res["p_value"])
        assert res["p_value"] > sampled.ALPHA and "samples" not in res
        assert res["false_alarm_rate"] == sampled.ALPHA == 0.001 and res["permutations"] == 1999
        eng.stop()


async def test_a_bonus_from_the_wrong_distribution_fails_and_only_this_gate_sees_it(
    engine_factory: Factory, baseline_samples: dict[str, Any]
) -> None:
    faulty = engine_factory([*ddtree_flags(), *DET, "--sim-fault", "bonus-unadjusted"])
    info = faulty.get_json("/server_info")
    assert info["sim"]["faults_active"] == ["bonus-unadjusted"]
    res = await _run(faulty, baseline_samples)
    assert res["passed"] is False and res["verdict"] == "distribution_differs"
    assert res["p_value"] <= sampled.ALPHA
    assert "differs from the baseline's" in res["reason"] and "most moved: prompt" in res["reason"]
    # greedy decoding never reaches the fault: the token-for-token gate passes on the same server
    good = engine_factory(DET)
    async with aiohttp.ClientSession() as session:
        ref = await run_lossless(session, Endpoint(good.url), None, baseline=True, deterministic=True,
                                 max_new_tokens=32)  # fmt: skip
        reference = make_reference(ref["output_ids"], max_new_tokens=32, source="b", deterministic=True)
        greedy = await run_lossless(session, Endpoint(faulty.url), reference, baseline=False, deterministic=True)
    assert greedy["verdict"] == "lossless", greedy["reason"]


async def test_the_fault_bites_tree_verification_only(
    engine_factory: Factory, baseline_samples: dict[str, Any]
) -> None:
    chain = engine_factory([*DFLASH, "--sim-fault", "bonus-unadjusted"])
    assert chain.get_json("/server_info")["sim"]["faults_active"] == []
    res = await _run(chain, baseline_samples)
    assert res["verdict"] == "same_distribution", res["reason"]


async def test_what_cannot_be_judged_is_said(engine_factory: Factory, baseline_samples: dict[str, Any]) -> None:
    tree = engine_factory(ddtree_flags())
    res = await _run(tree, None, samples=5)
    assert res["verdict"] == "no_baseline" and res["passed"] is False and "{algorithm: none}" in res["reason"]
    res = await _run(tree, baseline_samples, samples=5, temperature=0.7)
    assert res["verdict"] == "bad_reference" and "not comparable" in res["reason"]
    res = await _run(tree, {**baseline_samples, "algorithm": "ddtree"}, samples=5)
    assert res["verdict"] == "bad_reference" and "speculative server" in res["reason"]
    cut = engine_factory([*ddtree_flags(), "--sim-fault", "abort-after:0"])  # every generation ends halfway
    res = await _run(cut, baseline_samples, samples=2)
    assert res["verdict"] == "short_output" and "stopped before max_new_tokens=6" in res["reason"]
    locked = engine_factory([*ddtree_flags(), "--api-key", "sk-other"])  # the gate sends no key: 401
    res = await _run(locked, baseline_samples, samples=2)
    assert res["verdict"] == "generation_failed" and "HTTP 401" in res["reason"] and res["passed"] is False
    with pytest.raises(ValueError, match="temperature=0 > 0"):
        await _run(tree, baseline_samples, temperature=0)
