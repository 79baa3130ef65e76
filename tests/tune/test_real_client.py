"""The tuner reads what the real benchmark client writes: step time, every SLO metric, the projection.

The simulated engine runs as a process; the bundle's own client (``repro_py.bench.run_matrix``) measures
it in-process, as a sweep or a tuning run does. No fake writes these cells.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Iterator
from typing import Any

import pytest

from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.endpoint import Endpoint
from repro_py.simengine import perf_model
from repro_py.simengine.testing import EngineGroup, ddtree_flags
from repro_py.sweep.grid import validate_config
from repro_py.tune import proposals, verdict
from repro_py.tune.ladder import make_ladder
from repro_py.tune.noise import NoiseModel
from repro_py.tune.objectives import SLO_METRICS, Cell, find_cell, make_objectives, parse_slo, repeat_values, step_ms
from repro_py.tune.records import Proposal
from repro_py.tune.search import Search, SearchSettings
from repro_py.tune.space import validated
from tests.sweep.conftest import make_target

SPEED = 5.0  # steps of milliseconds: a busy machine's scheduling delays do not swamp them
TOKENS = 64
CONFIGS = {
    "ddtree-b8-t4-w2048-bs8": {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
    "ddtree-b5-t1-w2048-bs8": {"algorithm": "ddtree", "budget": 5, "topk": 1, "window": 2048, "block_size": 8},
}
PAIRS = 3
LOOSE = {"latency": "<=100000", "tps": ">=1", "gate": ">=0.8"}


async def _measure(url: str, *, full: bool) -> list[dict[str, Any]]:
    endpoint = Endpoint(url)
    short = await run_matrix(
        endpoint, BenchSettings(contexts=(60,), concurrency=(1, 32) if full else (1,), repeats=2, max_tokens=TOKENS)
    )
    cells: list[dict[str, Any]] = list(short["cells"])
    if full:
        long = BenchSettings(contexts=(4096,), concurrency=(1,), repeats=2, max_tokens=TOKENS)
        cells += (await run_matrix(endpoint, long))["cells"]
        # short and full rung side by side, three times over: a busy machine's slow moments land on both of a
        # pair (measured one after the other) instead of on one rung only
        for pair in range(PAIRS):
            for tokens in (TOKENS, 512):
                rung = BenchSettings(contexts=(60,), concurrency=(1,), repeats=2, max_tokens=tokens)
                got = (await run_matrix(endpoint, rung))["cells"]
                cells += [{**c, "max_tokens": tokens, "pair": pair} for c in got]
    return cells


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Real cells per config: b8-t4 at every objective's cell (and 512 tokens at 60 x 1), b5-t1 at 60 x 1."""
    group = EngineGroup(tmp_path_factory.mktemp("models"), ["--sim-load-seconds", "0", "--sim-warmup-seconds", "0"])
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        for label, raw in CONFIGS.items():
            spec = validate_config(raw, simulated=True).spec
            assert spec.budget is not None and spec.topk is not None
            flags = ddtree_flags(budget=spec.budget, topk=spec.topk)
            eng = group.start([*flags, "--enable-metrics", "--sim-speed", str(SPEED)])
            out[label] = asyncio.run(_measure(eng.url, full=label == "ddtree-b8-t4-w2048-bs8"))
    finally:
        group.stop_all()
    yield out


def _search(slos: list[str], labels: list[str]) -> Search:
    target = make_target()
    space = validated(target, [CONFIGS[label] for label in labels], source="test")
    settings = SearchSettings(
        objectives=make_objectives(["single-stream"]),
        ladder=make_ladder(full_tokens=TOKENS, screen_tokens=TOKENS, full_repeats=2, screen_repeats=2),
        slos=tuple(parse_slo(s) for s in slos),
        all_objectives=make_objectives(["single-stream", "throughput", "long-context"]),
    )
    return Search(space, settings, NoiseModel())


def _short(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if "pair" not in c]


def _pair(cells: list[dict[str, Any]], pair: int, tokens: int) -> dict[str, Any] | None:
    return find_cell([c for c in cells if c.get("pair") == pair and c["max_tokens"] == tokens], Cell(60, 1))


def test_the_step_time_is_read_from_the_clients_per_token_latency_and_the_counters(
    measured: dict[str, list[dict[str, Any]]],
) -> None:
    cell = find_cell(_short(measured["ddtree-b8-t4-w2048-bs8"]), Cell(60, 1))
    assert cell is not None and cell["status"] == "ok", cell
    got = step_ms(cell)
    model = perf_model.ModelConfig(mode="ddtree", block_size=8, budget=8, topk=4, window=2048)
    want = perf_model.step_ms(model, 1, 60) / SPEED  # time per token x tokens per verify step
    assert got is not None, f"no step time from the client's cell (repeat keys: {sorted(cell['repeats'][0])})"
    assert 0.5 * want < got < 2.0 * want, (got, want)
    # 32 streams: the client reads chunks in bursts (their gaps say little), the per-token time still holds
    # (the engine may run late on a loaded machine: a wider upper bound)
    busy = find_cell(_short(measured["ddtree-b8-t4-w2048-bs8"]), Cell(60, 32))
    got, want = step_ms(busy), perf_model.step_ms(model, 32, 60) / SPEED
    assert got is not None and 0.5 * want < got < 3.0 * want, (got, want)


def test_every_slo_metric_reads_a_value_from_every_repeat(measured: dict[str, list[dict[str, Any]]]) -> None:
    cell = find_cell(_short(measured["ddtree-b8-t4-w2048-bs8"]), Cell(60, 1))
    for metric, (kind, _) in SLO_METRICS.items():
        if kind == "latency":
            assert len(repeat_values(cell, metric)) == 2, f"{metric}: no value in the client's repeats"


def test_slos_on_every_metric_that_every_config_meets_leave_a_winner(
    measured: dict[str, list[dict[str, Any]]],
) -> None:
    slos = [f"{metric}{LOOSE[kind]}" for metric, (kind, _) in SLO_METRICS.items()]
    search = _search(slos, ["ddtree-b8-t4-w2048-bs8"])
    label = "ddtree-b8-t4-w2048-bs8"
    search.start(Proposal(search.space.by_label()[label], "test"))
    assert search.cells_for(label, 0) == [Cell(60, 1), Cell(60, 32), Cell(4096, 1)]
    assert search.judge(label, 0, _short(measured[label])) == {"single-stream"}
    search.finish(label, {"status": "ok", "gates": {"passed": True, "coding": {"pass_rate": 1.0}}})
    (winner,) = verdict.winners(search)
    assert winner.label == label, f"{', '.join(slos)}: {winner.note}; SLO failures {search.records[label].slo_failures}"


def test_the_surrogate_models_acceptance_over_step_time_from_real_cells(
    measured: dict[str, list[dict[str, Any]]],
) -> None:
    search = _search([], list(CONFIGS))
    for label in CONFIGS:
        search.start(Proposal(search.space.by_label()[label], "test"))
        search.judge(label, 0, _short(measured[label]))
    surrogate = proposals.fit_surrogates(search)["single-stream"]
    assert surrogate.mode == "acceptance/step", "the surrogate fell back to modelling tok/s directly"


def test_a_short_rungs_projection_from_real_timing_lands_near_the_full_rung(
    measured: dict[str, list[dict[str, Any]]],
) -> None:
    from repro_py.tune.projection import projected_values  # noqa: PLC0415

    cells = measured["ddtree-b8-t4-w2048-bs8"]
    ratios = []
    for pair in range(PAIRS):
        short, full = _pair(cells, pair, TOKENS), _pair(cells, pair, 512)
        measured_full = statistics.fmean(repeat_values(full, "output_tps"))
        raw = statistics.fmean(repeat_values(short, "output_tps"))
        projected = projected_values(short, TOKENS, 512)
        assert projected is not None and len(projected) == 2
        # the raw short figure carries the first token's latency over 64 tokens; the projection spreads it over 512
        assert raw < statistics.fmean(projected), (pair, raw, projected)
        ratios.append(statistics.fmean(projected) / measured_full)
    # the median pair: one pair whose two rungs a loaded machine slowed unequally does not decide
    assert abs(statistics.median(ratios) - 1) < 0.15, ratios
