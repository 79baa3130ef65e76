"""Acceptance under sampling: the model against each published figure (DFlash, DDTree, EAGLE-3 at T = 0 and
T = 1), the fitted constants, and the engine drawing its acceptance from the model at each request's
temperature."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from repro_py.simengine import accept_sampling as acc
from repro_py.simengine import perf_model
from repro_py.simengine.metrics import Metrics
from repro_py.simengine.scheduler import Request, Scheduler
from repro_py.simengine.textgen import TextPlan

B8T4 = perf_model.ModelConfig(mode="ddtree", block_size=8, budget=8, topk=4, window=2048)
CHAIN = perf_model.ModelConfig(mode="dflash", block_size=8, window=2048)


@pytest.mark.parametrize("fig", acc.PUBLISHED, ids=[f.name for f in acc.PUBLISHED])
def test_the_model_is_within_10_percent_of_each_published_figure(fig: acc.PublishedTau) -> None:
    modelled = acc.modelled(fig)
    assert abs(modelled - fig.sampled) / fig.sampled <= 0.10, (fig.source, fig.sampled, modelled)
    assert modelled < fig.greedy  # sampling accepts less than greedy decoding, as every figure says


@pytest.mark.parametrize("family", acc.FAMILIES)
def test_each_constant_is_the_minimax_fit_of_its_family(family: str) -> None:
    decay, worst = acc.minimax_decay(family)
    assert decay == pytest.approx(acc.DECAY[family], abs=0.0011)
    assert worst < 0.10
    assert sum(1 for f in acc.PUBLISHED if f.family == family) >= 4  # never fitted to a single figure


def test_the_per_depth_acceptance_reproduces_the_greedy_figure() -> None:
    for fig in acc.PUBLISHED:
        alpha = acc.per_depth_acceptance(fig.greedy, fig.depth)
        assert 1.0 + acc.accepted_drafts(alpha, fig.depth) == pytest.approx(fig.greedy, abs=1e-6)
    assert acc.per_depth_acceptance(9.0, 7) == 1.0 and acc.per_depth_acceptance(1.0, 7) == 0.0


def test_the_engine_model_falls_with_temperature_and_keeps_greedy_unchanged() -> None:
    for cfg in (B8T4, CHAIN):
        greedy, warm, hot = (perf_model.accept_length(cfg, 60, t) for t in (0.0, 0.7, 1.0))
        assert greedy == perf_model.accept_length(cfg, 60)  # the greedy calibration is untouched
        assert 1.0 < hot < warm < greedy
    assert perf_model.accept_length(perf_model.ModelConfig(mode="none"), 60, 1.0) == 1.0
    # a chain loses more to sampling than a tree (the DDTree paper: DFlash 7.79 -> 6.46, DDTree 10.73 -> 9.54)
    tree_ratio = perf_model.accept_length(B8T4, 60, 1.0) / perf_model.accept_length(B8T4, 60)
    chain_ratio = perf_model.accept_length(CHAIN, 60, 1.0) / perf_model.accept_length(CHAIN, 60)
    assert chain_ratio < tree_ratio < 1.0
    with pytest.raises(ValueError, match="family 'medusa': allowed: dflash, ddtree, eagle3"):
        acc.sampled_accept_length(4.0, 7, "medusa", 1.0)


def test_the_scheduler_draws_each_requests_acceptance_at_its_temperature() -> None:
    async def draws() -> dict[float, float]:
        sched = Scheduler(B8T4, speed=1.0, seed=3, max_running=8, kv_tokens=100_000, metrics=Metrics(
            model_name="m", speed=1.0, spec_enabled=True))  # fmt: skip
        plan = TextPlan(pieces=["x"] * 10, finish="length", matched_stop=None, garbled_from=None)
        out = {}
        for temperature in (0.0, 1.0):
            req = Request(rid="r", prompt_tokens=60, plan=plan, streaming=False, temperature=temperature)
            out[temperature] = statistics.fmean(sched._draw(req) for _ in range(40_000))
        return out

    means = asyncio.run(draws())
    for temperature, mean in means.items():  # the sample mean of 40k draws: within 1% of the model
        assert mean == pytest.approx(perf_model.accept_length(B8T4, 0, temperature), rel=0.01)
    assert means[1.0] < means[0.0]
