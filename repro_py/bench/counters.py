"""Server counters from ``/metrics`` (Prometheus text) and their deltas.

Acceptance length is never read from a log line: it is the delta of
``sglang:generation_tokens_total`` divided by the delta of
``sglang:spec_verify_calls_total`` across a measured interval, so a stale or
unrelated value cannot leak in, and the verify-step count behind the figure is
reported with it.

Series of one metric that differ only in a per-rank label (``tp_rank``,
``pp_rank``, ``moe_ep_rank``) describe the same requests seen from several
ranks; they are collapsed by taking the maximum. Remaining series (e.g. one
per ``dp_rank``) are summed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import aiohttp

from repro_py.endpoint import Endpoint

GEN_TOKENS = "sglang:generation_tokens_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
NUM_REQUESTS = "sglang:num_requests_total"
ACCEPT_GAUGE = "sglang:spec_accept_length"
GEN_THROUGHPUT_GAUGE = "sglang:gen_throughput"
ABORTED = "sglang:num_aborted_requests_total"
# the engine's own latency histograms (tokenizer collector), read as _sum / _count
E2E_HIST = "sglang:e2e_request_latency_seconds"
TTFT_HIST = "sglang:time_to_first_token_seconds"
TPOT_HIST = "sglang:request_time_per_output_token_seconds"
ITL_HIST = "sglang:inter_token_latency_seconds"
HISTOGRAMS = (E2E_HIST, TTFT_HIST, TPOT_HIST, ITL_HIST)
RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"})
WANTED = (
    GEN_TOKENS, PROMPT_TOKENS, VERIFY_CALLS, NUM_REQUESTS, ACCEPT_GAUGE, GEN_THROUGHPUT_GAUGE, ABORTED,
    *(f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_sum", "_count")),
)


class PromParseError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def _parse_labels(text: str, pos: int, line: str) -> tuple[tuple[tuple[str, str], ...], int]:
    """Parse ``{a="x",b="y"}`` starting at ``text[pos] == "{"``; return labels and the index after ``}``."""
    labels: list[tuple[str, str]] = []
    i = pos + 1
    n = len(text)
    while True:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            raise PromParseError(f"unterminated label set in {line!r}")
        if text[i] == "}":
            return tuple(labels), i + 1
        eq = text.find("=", i)
        if eq < 0:
            raise PromParseError(f"label without '=' in {line!r}")
        key = text[i:eq].strip()
        i = eq + 1
        if i >= n or text[i] != '"':
            raise PromParseError(f"label value not quoted in {line!r}")
        i += 1
        buf: list[str] = []
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                nxt = text[i + 1]
                buf.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
            else:
                buf.append(text[i])
                i += 1
        if i >= n:
            raise PromParseError(f"unterminated label value in {line!r}")
        labels.append((key, "".join(buf)))
        i += 1


def _parse_value(token: str, line: str) -> float:
    low = token.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(token)
    except ValueError:
        raise PromParseError(f"bad sample value {token!r} in {line!r}") from None


def parse_prometheus(text: str) -> list[Sample]:
    """Every sample in a Prometheus text exposition (comments and blank lines skipped)."""
    samples: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace >= 0 and (space < 0 or brace < space):
            name = line[:brace]
            labels, after = _parse_labels(line, brace, raw)
            rest = line[after:].split()
        else:
            parts = line.split()
            name, labels, rest = parts[0], (), parts[1:]
        if not rest:
            raise PromParseError(f"sample without a value: {raw!r}")
        samples.append(Sample(name=name, labels=labels, value=_parse_value(rest[0], raw)))
    return samples


def collapse(samples: list[Sample], name: str) -> float | None:
    """One number for metric ``name``: max over per-rank duplicates, sum over the rest; ``None`` if absent."""
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    found = False
    for s in samples:
        if s.name != name:
            continue
        found = True
        key = tuple(sorted((k, v) for k, v in s.labels if k not in RANK_LABELS))
        groups[key] = max(groups.get(key, -math.inf), s.value)
    if not found:
        return None
    return math.fsum(groups.values())


@dataclasses.dataclass(frozen=True)
class CounterSnapshot:
    """Values of the metrics the benchmark reads; ``error`` says why they are missing."""

    values: dict[str, float | None]
    error: str | None = None

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def snapshot_from_text(text: str) -> CounterSnapshot:
    try:
        samples = parse_prometheus(text)
    except PromParseError as exc:
        return CounterSnapshot(values={}, error=f"/metrics could not be parsed: {exc}")
    return CounterSnapshot(values={name: collapse(samples, name) for name in WANTED})


async def read_counters(
    session: aiohttp.ClientSession, endpoint: Endpoint, *, timeout_s: float = 10.0
) -> CounterSnapshot:
    """GET ``/metrics``; a missing endpoint gives a snapshot whose ``error`` says why."""
    try:
        async with session.get(
            endpoint.url("/metrics"), headers=endpoint.headers(), timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            body = await resp.text()
            if resp.status == 404:
                return CounterSnapshot(
                    values={}, error="GET /metrics returned 404: the server runs without --enable-metrics"
                )
            if resp.status != 200:
                return CounterSnapshot(values={}, error=f"GET /metrics returned HTTP {resp.status}: {body[:200]!r}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return CounterSnapshot(values={}, error=f"GET /metrics failed: {type(exc).__name__}: {exc}")
    return snapshot_from_text(body)


async def read_settled(
    session: aiohttp.ClientSession, endpoint: Endpoint, *, interval_s: float = 0.1, tries: int = 5
) -> CounterSnapshot:
    """Read ``/metrics`` until two consecutive reads agree on the counters (some are published lazily)."""
    prev = await read_counters(session, endpoint)
    for _ in range(tries):
        if prev.error is not None:
            return prev
        await asyncio.sleep(interval_s)
        cur = await read_counters(session, endpoint)
        if cur.error is None and all(cur.get(k) == prev.get(k) for k in (GEN_TOKENS, VERIFY_CALLS, NUM_REQUESTS)):
            return cur
        prev = cur
    return prev


@dataclasses.dataclass(frozen=True)
class EngineTiming:
    """The engine's own latency figures over an interval: histogram ``_sum`` / ``_count`` deltas."""

    requests: int | None  # finished requests the engine timed (e2e histogram count)
    e2e_mean_s: float | None
    ttft_mean_s: float | None
    itl_token_mean_s: float | None  # request_time_per_output_token: per request, then averaged
    itl_token_pooled_s: float | None  # inter_token_latency: decode time over tokens, pooled
    e2e_sum_s: float | None
    reason: str | None  # why figures are missing

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class CounterDelta:
    """What the server counted between two snapshots."""

    generation_tokens: int | None
    prompt_tokens: int | None
    verify_steps: int | None
    requests: int | None
    accept_length: float | None
    accept_length_reason: str | None
    aborted: int | None = None
    went_backwards: bool = False
    timing: EngineTiming | None = None

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def _diff(before: CounterSnapshot, after: CounterSnapshot, name: str) -> int | None:
    a, b = before.get(name), after.get(name)
    if a is None or b is None:
        return None
    return round(b - a)


def _fdiff(before: CounterSnapshot, after: CounterSnapshot, name: str) -> float | None:
    a, b = before.get(name), after.get(name)
    if a is None or b is None:
        return None
    return b - a


def engine_timing(before: CounterSnapshot, after: CounterSnapshot) -> EngineTiming:
    """Mean latencies the engine measured itself over the interval (independent of the client's clock)."""

    def mean(hist: str) -> float | None:
        total, count = _fdiff(before, after, hist + "_sum"), _fdiff(before, after, hist + "_count")
        if total is None or count is None or count <= 0 or total < 0:
            return None
        return total / count

    reason: str | None = None
    if before.error or after.error:
        reason = before.error or after.error
    elif after.get(E2E_HIST + "_count") is None:
        reason = f"{E2E_HIST} is absent from /metrics"
    count = _diff(before, after, E2E_HIST + "_count")
    if reason is None and (count is None or count <= 0):
        reason = f"{E2E_HIST} did not move across the interval"
    return EngineTiming(
        requests=count,
        e2e_mean_s=mean(E2E_HIST),
        ttft_mean_s=mean(TTFT_HIST),
        itl_token_mean_s=mean(TPOT_HIST),
        itl_token_pooled_s=mean(ITL_HIST),
        e2e_sum_s=_fdiff(before, after, E2E_HIST + "_sum"),
        reason=reason,
    )


def delta(before: CounterSnapshot, after: CounterSnapshot) -> CounterDelta:
    """Counter deltas and the acceptance length they imply (``None`` with a reason when they cannot)."""
    gen = _diff(before, after, GEN_TOKENS)
    verify = _diff(before, after, VERIFY_CALLS)
    reason: str | None = None
    accept: float | None = None
    if before.error or after.error:
        reason = before.error or after.error
    elif gen is None:
        reason = f"{GEN_TOKENS} is absent from /metrics"
    elif verify is None:
        reason = f"{VERIFY_CALLS} is absent from /metrics (no speculative decoding on this server)"
    elif verify < 0 or gen < 0:
        reason = "counters went backwards across the interval (server restarted?)"
    elif verify == 0:
        reason = f"{VERIFY_CALLS} did not move across the interval (no verify steps)"
    else:
        accept = gen / verify
    requests = _diff(before, after, NUM_REQUESTS)
    backwards = any(d is not None and d < 0 for d in (gen, verify, requests))
    return CounterDelta(
        generation_tokens=gen,
        prompt_tokens=_diff(before, after, PROMPT_TOKENS),
        verify_steps=verify,
        requests=requests,
        accept_length=accept,
        accept_length_reason=reason,
        aborted=_diff(before, after, ABORTED),
        went_backwards=backwards,
        timing=engine_timing(before, after),
    )
