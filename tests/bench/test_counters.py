from __future__ import annotations

import re

import pytest

from repro_py.bench import counters
from repro_py.bench.counters import PromParseError, parse_prometheus, snapshot_from_text

TEXT = """# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{engine_type="unified",model_name="m",is_streaming="false"} 100.0
sglang:generation_tokens_total{engine_type="unified",model_name="m",is_streaming="true"} 900.0
sglang:generation_tokens_created{engine_type="unified",model_name="m",is_streaming="true"} 1.7e9
sglang:spec_verify_calls_total{engine_type="unified",model_name="m"} 200
sglang:spec_accept_length{model_name="m",tp_rank="0",pp_rank="0"} 4.9
sglang:spec_accept_length{model_name="m",tp_rank="1",pp_rank="0"} 4.9
sglang:num_requests_total{model_name="a \\"quoted\\", {braced}",is_streaming="true"} 3 1700000000000
sglang:gen_throughput +Inf
"""


def test_parse_labels_escapes_and_timestamps() -> None:
    samples = parse_prometheus(TEXT)
    req = [s for s in samples if s.name == "sglang:num_requests_total"]
    assert len(req) == 1
    assert dict(req[0].labels)["model_name"] == 'a "quoted", {braced}'
    assert req[0].value == 3.0
    assert [s.value for s in samples if s.name == "sglang:gen_throughput"] == [float("inf")]


def test_collapse_sums_series_and_dedupes_ranks() -> None:
    snap = snapshot_from_text(TEXT)
    assert snap.get(counters.GEN_TOKENS) == 1000.0  # streaming + non-streaming series
    assert snap.get(counters.VERIFY_CALLS) == 200.0
    assert snap.get(counters.ACCEPT_GAUGE) == 4.9  # tp ranks report the same value: not summed
    assert snap.get(counters.PROMPT_TOKENS) is None


def test_delta_gives_accept_length_and_verify_steps() -> None:
    before = snapshot_from_text(TEXT)
    after = snapshot_from_text(TEXT.replace("900.0", "1390.0").replace(" 200\n", " 300\n"))
    d = counters.delta(before, after)
    assert d.generation_tokens == 490
    assert d.verify_steps == 100
    assert d.accept_length == pytest.approx(4.9)
    assert d.accept_length_reason is None


def test_delta_without_spec_counter_says_why() -> None:
    text = "\n".join(line for line in TEXT.splitlines() if "spec_verify" not in line)
    d = counters.delta(snapshot_from_text(text), snapshot_from_text(text))
    assert d.accept_length is None
    assert "spec_verify_calls_total is absent" in (d.accept_length_reason or "")


def test_delta_when_verify_did_not_move() -> None:
    snap = snapshot_from_text(TEXT)
    d = counters.delta(snap, snap)
    assert d.accept_length is None
    assert "did not move" in (d.accept_length_reason or "")


def test_delta_without_metrics_endpoint() -> None:
    why = "GET /metrics returned 404: the server runs without --enable-metrics"
    missing = counters.CounterSnapshot(values={}, error=why)
    d = counters.delta(missing, missing)
    assert d.accept_length is None
    assert "--enable-metrics" in (d.accept_length_reason or "")


@pytest.mark.parametrize("bad", ['x{a="1" 2', "x{a=1} 2", "lonely_name", "x notanumber"])
def test_malformed_lines_raise(bad: str) -> None:
    with pytest.raises(PromParseError, match=re.escape(repr(bad))):  # the message names the bad line
        parse_prometheus(bad)
    snap = snapshot_from_text(bad)
    assert snap.values == {}
    assert (snap.error or "").startswith("/metrics could not be parsed: ") and repr(bad) in (snap.error or "")
