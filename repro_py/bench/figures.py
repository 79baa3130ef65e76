"""Figures of one repeat and of one cell, and whether they count.

A repeat is ``ok`` when at most ``error_budget`` of its requests failed (default
0: every measured request must finish normally), the server stayed up and
answered after them (``liveness``: otherwise the repeat fails whatever the
budget) and its counters did not go backwards (a restart under the repeat);
otherwise it is ``failed``, with the reason, and none of its figures enter the
cell's medians. ``budget_used`` is how many failed requests an ``ok`` repeat
counted against its budget. A cell's figures are medians over its ``ok``
repeats only.

The timing check compares the client's figures with the engine's own: the
deltas of sglang's latency histograms (``sglang:e2e_request_latency_seconds``,
``time_to_first_token_seconds``, ``request_time_per_output_token_seconds``)
over the same repeat. ``timing_ratio`` is client / engine: a little above 1
is the HTTP path; far from 1 means one of the two clocks is wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from repro_py.bench import counters, stats
from repro_py.bench.client import RequestResult


def _mean_ratio(client: float | None, engine: float | None) -> float | None:
    if client is None or engine is None or engine <= 0:
        return None
    return client / engine


def timing_check(ok: list[RequestResult], delta: counters.CounterDelta) -> dict[str, Any]:
    """The engine's own timing of the repeat next to the client's, and their ratios."""
    timing = delta.timing
    client = {
        "e2e_mean_ms": _ms(stats.mean([r.latency_s for r in ok])),
        "ttft_mean_ms": _ms(stats.mean([r.ttft_s for r in ok if r.ttft_s is not None])),
        "itl_token_mean_ms": _ms(stats.mean([t for t in (r.itl_token_s for r in ok) if t is not None])),
        "output_tps_per_request": _pooled_tps(sum(r.output_tokens or 0 for r in ok), sum(r.latency_s for r in ok)),
        "requests": len(ok),
    }
    if timing is None or timing.reason is not None:
        reason = timing.reason if timing is not None else "no counters were read"
        return {"client": client, "engine": None, "ratio": None, "reason": reason}
    engine = {
        "e2e_mean_ms": _ms(timing.e2e_mean_s),
        "ttft_mean_ms": _ms(timing.ttft_mean_s),
        "itl_token_mean_ms": _ms(timing.itl_token_mean_s),
        "output_tps_per_request": _pooled_tps(delta.generation_tokens, timing.e2e_sum_s),
        "requests": timing.requests,
    }
    ratio = {key: _mean_ratio(client[key], engine[key]) for key in
             ("e2e_mean_ms", "ttft_mean_ms", "itl_token_mean_ms", "output_tps_per_request")}
    reason = None
    if timing.requests != len(ok):
        reason = f"the engine timed {timing.requests} requests, the client {len(ok)} successful ones"
    return {"client": client, "engine": engine, "ratio": ratio, "reason": reason}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _pooled_tps(tokens: int | None, seconds: float | None) -> float | None:
    """Output tokens per request-second (sum over requests / sum of their latencies)."""
    if tokens is None or seconds is None or seconds <= 0:
        return None
    return tokens / seconds


def repeat_figures(
    results: list[RequestResult], wall_s: float, delta: counters.CounterDelta, *, error_budget: int = 0,
    trouble: str | None = None,
) -> dict[str, Any]:
    """The repeat's figures and status; ``trouble`` (``liveness.repeat_trouble``) fails it whatever the budget."""
    ok = [r for r in results if r.ok]
    errors = [r for r in results if not r.ok]
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    if ok:
        first = min(r.start for r in ok)
        last = max(r.end for r in ok)
        span = max(last - first, 1e-9)
    else:
        span = wall_s
    per_request = [t for t in (r.output_tps for r in ok) if t is not None]
    ttft = [r.ttft_s * 1000.0 for r in ok if r.ttft_s is not None]
    itl_chunk = [gap * 1000.0 for r in ok for gap in r.itl_s]
    itl_token = [t * 1000.0 for t in (r.itl_token_s for r in ok) if t is not None]
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    samples = sorted({r.error or "?" for r in errors})[:3]
    reason: str | None = None
    if trouble is not None:
        reason = f"{trouble} ({len(errors)}/{len(results)} requests failed; none counted against the error budget)"
    elif len(errors) > error_budget:
        reason = f"{len(errors)}/{len(results)} requests failed (error budget {error_budget}); first: {samples[0]}"
    elif delta.went_backwards:
        reason = "the server's counters went backwards during the repeat: it restarted"
    elif not ok:
        reason = "no request was sent"
    return {
        "status": "ok" if reason is None else "failed",
        "reason": reason,
        "requests": len(results),
        "ok": len(ok),
        "errors": len(errors),
        "error_budget": error_budget,
        "budget_used": len(errors) if reason is None else None,
        "error_samples": samples,
        "wall_s": span,
        "output_tokens": out_tokens,
        "output_tps": out_tokens / span if ok else 0.0,
        "output_tps_per_request": stats.mean(per_request),
        "ttft_ms": stats.percentiles(ttft),
        "itl_chunk_ms": stats.percentiles(itl_chunk),
        "itl_token_ms": stats.percentiles(itl_token),
        "finish_reasons": dict(Counter(r.finish_reason or "none" for r in results)),
        "prompt_tokens": {"min": min(prompt_counts), "max": max(prompt_counts)} if prompt_counts else None,
        "accept_length": delta.accept_length,
        "verify_steps": delta.verify_steps,
        "counters": delta.as_dict(),
        "timing": timing_check(ok, delta),
    }


def summarize_cell(
    repeats: list[dict[str, Any]], deltas: list[counters.CounterDelta], cv_threshold: float
) -> dict[str, Any]:
    """Median figures over the ``ok`` repeats (failed ones are left out), pooled acceptance, CV, noisy."""
    used = [i for i, r in enumerate(repeats) if r.get("status", "ok") == "ok"]
    good = [repeats[i] for i in used]
    good_deltas = [deltas[i] for i in used]
    failed = [
        {"repeat": r.get("repeat", i), "reason": r.get("reason")}
        for i, r in enumerate(repeats) if r.get("status", "ok") != "ok"
    ]
    used = [int(r["budget_used"]) for r in repeats if r.get("budget_used") is not None]
    base = {
        "repeats_ok": len(good),
        "repeats_failed": failed,
        "errors": sum(int(r["errors"]) for r in repeats),
        "requests": sum(int(r["requests"]) for r in repeats),
        "budget_used": max(used) if used else 0,  # the most failed requests one ok repeat counted
    }
    if not good:
        return {"median": None, "cv": {"output_tps": None}, "noisy": False, **base}
    tps = [float(r["output_tps"]) for r in good]
    per_req = [float(r["output_tps_per_request"]) for r in good if r["output_tps_per_request"] is not None]
    accept: float | None = None
    verify_total: int | None = None
    accept_reason: str | None = None
    if all(d.accept_length is not None for d in good_deltas):
        gen_total = sum(d.generation_tokens or 0 for d in good_deltas)
        verify_total = sum(d.verify_steps or 0 for d in good_deltas)
        accept = gen_total / verify_total if verify_total else None
    else:
        reasons = [d.accept_length_reason for d in good_deltas if d.accept_length_reason]
        accept_reason = reasons[0] if reasons else "no measured repeats"
        if all(d.verify_steps is not None for d in good_deltas):
            verify_total = sum(d.verify_steps or 0 for d in good_deltas)
    ratios = [r["timing"]["ratio"] for r in good if (r.get("timing") or {}).get("ratio")]
    cv_tps = stats.cv(tps)
    median = {
        "output_tps": stats.median(tps),
        "output_tps_per_request": stats.median(per_req),
        "ttft_ms": stats.median_of_dicts([r["ttft_ms"] for r in good]),
        "itl_chunk_ms": stats.median_of_dicts([r["itl_chunk_ms"] for r in good]),
        "itl_token_ms": stats.median_of_dicts([r["itl_token_ms"] for r in good]),
        "accept_length": accept,
        "accept_length_reason": accept_reason,
        "verify_steps": verify_total,
        "timing_ratio": stats.median_of_dicts(ratios) if ratios else None,
        "repeats_used": len(good),
    }
    return {
        "median": median,
        "cv": {"output_tps": cv_tps},
        "noisy": cv_tps is not None and cv_tps > cv_threshold,
        **base,
    }
