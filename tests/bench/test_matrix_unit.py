from __future__ import annotations

import time

import aiohttp
import pytest
from aiohttp import web

from repro_py.bench import counters
from repro_py.bench.client import RequestResult
from repro_py.bench.figures import repeat_figures, summarize_cell
from repro_py.bench.matrix import BenchSettings, flush_cache, kv_skip_reason
from repro_py.endpoint import Endpoint
from repro_py.simengine.process import free_port


def test_kv_skip_states_the_numbers() -> None:
    reason = kv_skip_reason(context=8192, concurrency=64, requests=64, max_tokens=512,
                            max_total_num_tokens=400_000, context_length=262_144)
    assert reason is not None
    assert "64" in reason and "8192" in reason and "512" in reason and "557056" in reason and "400000" in reason
    assert kv_skip_reason(context=4096, concurrency=64, requests=64, max_tokens=512,
                          max_total_num_tokens=400_000, context_length=262_144) is None
    # fewer requests than slots: only that many are ever resident
    assert kv_skip_reason(context=8192, concurrency=64, requests=8, max_tokens=512,
                          max_total_num_tokens=400_000, context_length=None) is None


def test_context_length_skip() -> None:
    reason = kv_skip_reason(context=8192, concurrency=1, requests=1, max_tokens=512,
                            max_total_num_tokens=None, context_length=8192)
    assert reason is not None and "context_length 8192" in reason


def _delta(gen: int, verify: int) -> counters.CounterDelta:
    return counters.CounterDelta(gen, 0, verify, 1, gen / verify if verify else None, None)


def _rep(tps: float, status: str = "ok") -> dict[str, object]:
    return {"status": status, "reason": None if status == "ok" else "2/4 requests failed", "output_tps": tps,
            "output_tps_per_request": tps, "ttft_ms": {"p50": 1.0}, "itl_chunk_ms": {"p50": 2.0},
            "itl_token_ms": {"p50": 0.5}, "errors": 0 if status == "ok" else 2, "requests": 4, "timing": {}}


def test_summary_pools_acceptance_and_flags_noise() -> None:
    quiet = summarize_cell([_rep(100), _rep(101), _rep(99)], [_delta(490, 100), _delta(500, 100), _delta(510, 100)],
                           0.05)
    assert quiet["median"]["output_tps"] == 100
    assert quiet["median"]["accept_length"] == pytest.approx(5.0)
    assert quiet["median"]["verify_steps"] == 300
    assert quiet["noisy"] is False
    noisy = summarize_cell([_rep(100), _rep(150), _rep(80)], [_delta(5, 1)] * 3, 0.05)
    assert noisy["noisy"] is True
    assert noisy["cv"]["output_tps"] > 0.05


def test_summary_keeps_the_reason_when_accept_is_unknown() -> None:
    d = counters.CounterDelta(100, 0, None, 1, None, "sglang:spec_verify_calls_total is absent from /metrics")
    got = summarize_cell([_rep(10)], [d], 0.05)
    assert got["median"]["accept_length"] is None
    assert "absent" in got["median"]["accept_length_reason"]
    assert got["cv"]["output_tps"] is None and got["noisy"] is False


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="repeats"):
        BenchSettings(repeats=0)
    with pytest.raises(ValueError, match="contexts"):
        BenchSettings(contexts=())
    assert BenchSettings().requests_for(32) == 32
    assert BenchSettings(requests_per_cell=5).requests_for(32) == 5
    with pytest.raises(ValueError, match="error_budget=-1"):
        BenchSettings(error_budget=-1)


def test_failed_repeats_are_reported_and_never_averaged_in() -> None:
    """898.9 = median(1797.8, 0.0) was the field's figure with a dead server; a failed repeat is left out."""
    got = summarize_cell([_rep(1797.8), _rep(0.0, "failed")], [_delta(500, 100), _delta(0, 0)], 0.05)
    assert got["median"]["output_tps"] == 1797.8
    assert got["median"]["repeats_used"] == 1
    assert got["repeats_ok"] == 1 and got["repeats_failed"] == [{"repeat": 1, "reason": "2/4 requests failed"}]
    assert got["errors"] == 2 and got["requests"] == 8
    assert got["median"]["accept_length"] == pytest.approx(5.0)  # pooled over the ok repeat only
    nothing = summarize_cell([_rep(0.0, "failed")], [_delta(0, 0)], 0.05)
    assert nothing["median"] is None and nothing["repeats_ok"] == 0


def _result(ok: bool, tokens: int = 10, error: str | None = None) -> RequestResult:
    return RequestResult(ok=ok, error=error, start=0.0, end=1.0, ttft_s=0.1, output_tokens=tokens,
                         finish_reason="length" if ok else "abort", first_text_at=0.1, last_text_at=1.0)


def test_a_repeat_is_ok_only_within_the_error_budget() -> None:
    delta = _delta(50, 10)
    results = [_result(True)] * 3 + [_result(False, 4, "finish_reason 'abort': ...")]
    strict = repeat_figures(results, 1.0, delta)
    assert strict["status"] == "failed" and strict["errors"] == 1
    assert "1/4 requests failed (error budget 0)" in strict["reason"] and "abort" in strict["reason"]
    assert strict["output_tokens"] == 30  # the aborted request's 4 tokens count nowhere
    lenient = repeat_figures(results, 1.0, delta, error_budget=1)
    assert lenient["status"] == "ok" and lenient["errors"] == 1
    restarted = repeat_figures([_result(True)], 1.0, counters.CounterDelta(-5, 0, -1, -1, None, "x",
                                                                              went_backwards=True))
    assert restarted["status"] == "failed" and "restarted" in restarted["reason"]


async def test_flush_cache_retries_a_busy_server_but_not_a_gone_one() -> None:
    calls: list[int] = []

    async def busy_twice(request: web.Request) -> web.Response:
        calls.append(1)
        if len(calls) <= 2:  # sglang refuses to flush while requests run
            return web.Response(status=400, text="Cache not flushed because there are pending requests.")
        return web.Response(text="Cache flushed.")

    app = web.Application()
    app.router.add_post("/flush_cache", busy_twice)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert await flush_cache(session, Endpoint(f"http://127.0.0.1:{port}")) is None
            assert len(calls) == 3
            # nothing listens (a crashed engine): three connection attempts, not twenty
            start = time.monotonic()
            why = await flush_cache(session, Endpoint(f"http://127.0.0.1:{free_port()}"), tries=20, connect_tries=3)
            elapsed = time.monotonic() - start
    finally:
        await runner.cleanup()
    assert why is not None and why.startswith("POST /flush_cache failed: ClientConnectorError")
    assert elapsed < 20 * 0.25  # twenty busy retries would sleep 5 s; three refused connects sleep 0.5 s
