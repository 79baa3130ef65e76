"""Objectives, SLOs and reading per-repeat figures from bench cells (failed repeats never count)."""

from __future__ import annotations

import pytest

from repro_py.tune.objectives import (
    Cell,
    ObjectiveError,
    make_objectives,
    parse_slo,
    repeat_values,
    slo_cells,
    step_ms,
)


def test_objectives_and_their_cells() -> None:
    objs = make_objectives(["throughput", "single_stream", "long-context"], concurrency=16, long_context=8192)
    assert [(o.key, o.cell) for o in objs] == [
        ("throughput", Cell(60, 16)),
        ("single-stream", Cell(60, 1)),
        ("long-context", Cell(8192, 1)),
    ]
    assert objs[0].metric == "throughput_tps"


@pytest.mark.parametrize(
    ("names", "kwargs", "message"),
    [
        (["latency"], {}, "--objective 'latency' is not known; allowed: single-stream, throughput, long-context"),
        (["throughput", "throughput"], {}, "given twice"),
        ([], {}, "--objective is required"),
        (["throughput"], {"concurrency": 1}, "--concurrency 1"),
        (["long-context"], {"long_context": 60}, "--long-context 60"),
    ],
)
def test_bad_objectives_name_the_value(names: list[str], kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ObjectiveError, match=message):
        make_objectives(names, **kwargs)


def test_slo_parsing_and_checks() -> None:
    slo = parse_slo("ttft_p99_ms <= 2000")
    assert (slo.metric, slo.op, slo.value, str(slo), slo.kind) == (
        "ttft_p99_ms",
        "<=",
        2000.0,
        "ttft_p99_ms<=2000",
        "latency",
    )
    assert slo.met(1999) and not slo.met(2001)
    assert slo.clearly_violated(2100, 2300) and not slo.clearly_violated(1900, 2300)
    floor = parse_slo("single_stream_tps>=120")
    assert floor.clearly_violated(100, 110) and not floor.clearly_violated(100, 130)
    for bad, message in (
        ("ttft<2000", "expected METRIC<=VALUE"),
        ("p99<=5", "metric 'p99' is not known"),
        ("coding_pass_rate>=2", "a fraction 0..1"),
    ):
        with pytest.raises(ObjectiveError, match=message):
            parse_slo(bad)


def test_a_throughput_slo_adds_that_objectives_cell() -> None:
    every = make_objectives(["single-stream", "throughput", "long-context"])
    chosen = make_objectives(["throughput"])
    slos = [parse_slo("single_stream_tps>=100"), parse_slo("ttft_p99_ms<=10")]
    assert slo_cells(slos, chosen, every) == [Cell(60, 1)]
    assert slo_cells([parse_slo("throughput_tps>=100")], chosen, every) == []


def _rep(tps: float, *, errors: int = 0, ok: int = 1, itl: float = 30.0) -> dict[str, object]:
    return {
        "output_tps": tps,
        "errors": errors,
        "ok": ok,
        "ttft_ms": {"p50": 20.0, "p99": 25.0},
        "itl_ms": {"p50": itl, "p99": itl * 2},  # the per-chunk ITL's name in results before per-token ITL
        "itl_token_ms": {"p50": itl / 4, "p99": itl / 2},
        "accept_length": 4.0,
    }


def test_repeats_with_a_failed_request_are_not_measurements() -> None:
    cell = {"status": "ok", "repeats": [_rep(100.0), _rep(40.0, errors=1), _rep(0.0, ok=0), _rep(104.0, itl=32.0)]}
    assert repeat_values(cell, "output_tps") == [100.0, 104.0]
    assert repeat_values(cell, "ttft_p99_ms") == [25.0, 25.0]
    assert repeat_values(cell, "itl_p99_ms") == [60.0, 64.0] and repeat_values(cell, "itl_token_p50_ms") == [7.5, 8.0]
    assert step_ms(cell) == 31.0  # time per token x acceptance, the median over the valid repeats
    without_counters = {"status": "ok", "repeats": [{**_rep(100.0), "accept_length": None}]}
    assert step_ms(without_counters) is None
    assert repeat_values({"status": "error", "repeats": [_rep(100.0)]}, "output_tps") == []
    assert repeat_values(None, "output_tps") == []
