"""The benchmark matrix: context length x concurrency, repeated, against one server.

Per cell: skip (with the numbers) if it cannot fit the server's KV pool or
context length; build the prompt to the requested length; flush the cache;
send warm-up requests (excluded from every figure); then ``repeats`` times:
flush the cache, read the counters, send ``requests_per_cell`` streaming
requests through ``concurrency`` workers, read the counters again. A repeat's
aggregate throughput is the server-reported output tokens of its successful
requests over the wall time from the first request sent to the last one
finished. Acceptance length is the counter delta ratio pooled over the
repeats. The cell's figures are medians over its ``ok`` repeats, with the
coefficient of variation of aggregate throughput; a CV above the threshold
marks it noisy.

A failure is never a measurement: a repeat with more failed requests than the
error budget (default 0) is ``failed`` and left out of every figure, and a
cell with any failed repeat is ``failed`` with the reasons. The budget counts
only errors from a server that stayed up: after any failed request the server
is probed and its identity read again (``liveness``); one that stopped
answering, restarted or cut its connections fails the repeat whatever the
budget. When the server no longer answers or restarted, the cell ends at once
(``server_lost``) and the cells after it are not run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from repro_py import sampling_settings
from repro_py.bench import counters
from repro_py.bench.client import RequestResult, stream_chat
from repro_py.bench.figures import repeat_figures, summarize_cell
from repro_py.bench.liveness import probe_server, repeat_trouble, server_identity
from repro_py.bench.prompts import BuiltPrompt, PromptBuilder, PromptError, check_prompt_tokens, prompt_tolerance
from repro_py.bench.server_info import ServerInfo, ServerInfoError, fetch_server_info
from repro_py.endpoint import Endpoint

DEFAULT_CONTEXTS: tuple[int, ...] = (60, 1024, 4096, 8192)
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 8, 32, 64)
WARMUP_MAX_TOKENS = 32


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    repeats: int = 3
    max_tokens: int = 512
    warmup: int = 1
    cv_threshold: float = 0.05
    requests_per_cell: int | None = None  # None: one request per concurrency slot
    temperature: float = sampling_settings.DEFAULT_TEMPERATURE  # greedy: see repro_py.sampling_settings
    top_p: float = sampling_settings.DEFAULT_TOP_P
    request_timeout_s: float = 600.0
    prompt_abs_tol: int = 4
    prompt_rel_tol: float = 0.02
    flush_cache: bool = True
    ignore_eos: bool = False  # sglang extension: generate exactly max_tokens (no early EOS)
    error_budget: int = 0  # failed requests a repeat may have and still count (from a server that stayed up)

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not self.contexts or any(c < 1 for c in self.contexts):
            problems.append(f"contexts={list(self.contexts)} must be positive integers")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            problems.append(f"concurrency={list(self.concurrency)} must be positive integers")
        if self.repeats < 1:
            problems.append(f"repeats={self.repeats} must be >= 1")
        if self.max_tokens < 1:
            problems.append(f"max_tokens={self.max_tokens} must be >= 1")
        if self.warmup < 0:
            problems.append(f"warmup={self.warmup} must be >= 0")
        if not self.cv_threshold > 0:
            problems.append(f"cv_threshold={self.cv_threshold} must be > 0")
        if self.requests_per_cell is not None and self.requests_per_cell < 1:
            problems.append(f"requests_per_cell={self.requests_per_cell} must be >= 1")
        if self.request_timeout_s <= 0:
            problems.append(f"request_timeout_s={self.request_timeout_s} must be > 0")
        if self.error_budget < 0:
            problems.append(f"error_budget={self.error_budget} must be >= 0 (failed requests a repeat may have)")
        try:
            sampling_settings.parse(self.temperature, self.top_p)
        except sampling_settings.SamplingError as exc:
            problems += exc.problems
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def sampling(self) -> sampling_settings.Sampling:
        return sampling_settings.Sampling(float(self.temperature), float(self.top_p))

    def requests_for(self, concurrency: int) -> int:
        return self.requests_per_cell if self.requests_per_cell is not None else concurrency

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["contexts"] = list(self.contexts)
        out["concurrency"] = list(self.concurrency)
        return out


def kv_skip_reason(
    *,
    context: int, concurrency: int, requests: int, max_tokens: int, max_total_num_tokens: int | None,
    context_length: int | None,
) -> str | None:
    """Why a cell cannot run on this server, or ``None`` if it fits."""
    if context_length is not None and context + max_tokens > context_length:
        return (
            f"context {context} + max_tokens {max_tokens} = {context + max_tokens} tokens exceeds the "
            f"server's context_length {context_length}"
        )
    if max_total_num_tokens is None:
        return None
    active = min(concurrency, requests)
    need = active * (context + max_tokens)
    if need > max_total_num_tokens:
        return (
            f"{active} concurrent requests x (context {context} + max_tokens {max_tokens}) = {need} KV tokens "
            f"exceeds the server's max_total_num_tokens {max_total_num_tokens}"
        )
    return None


async def flush_cache(
    session: aiohttp.ClientSession, endpoint: Endpoint, *, tries: int = 20, connect_tries: int = 3
) -> str | None:
    """POST ``/flush_cache`` (retrying while the server is busy); ``None`` on success, else why not.

    A busy server (it refuses to flush while requests run) is retried up to ``tries`` times; a server
    that cannot be reached at all (e.g. it crashed) only ``connect_tries`` times: waiting longer does
    not bring it back, and the cell's requests report the failure themselves.
    """
    last = ""
    unreachable = 0
    for _ in range(tries):
        try:
            async with session.post(
                endpoint.url("/flush_cache"), headers=endpoint.headers(admin=True),
                timeout=aiohttp.ClientTimeout(total=30),
            ) as resp:
                text = await resp.text()
                if resp.status == 200:
                    return None
                if resp.status in (401, 403):  # a key problem: asking again does not change it
                    return (f"POST /flush_cache returned HTTP {resp.status}: cache not flushed (the server has an "
                            "admin key: sglang_service_admin_api_key, or --admin-api-key / $SGLANG_ADMIN_API_KEY)")
                if resp.status in (404, 405):
                    return f"POST /flush_cache returned HTTP {resp.status}: cache not flushed"
                last = f"HTTP {resp.status}: {text[:200]!r}"
        except aiohttp.ClientConnectorError as exc:
            last = f"{type(exc).__name__}: {exc}"
            unreachable += 1
            if unreachable >= connect_tries:
                break
        except (aiohttp.ClientError, TimeoutError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.25)
    return f"POST /flush_cache failed: {last}"


async def run_requests(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    prompt: BuiltPrompt,
    *,
    count: int,
    concurrency: int,
    max_tokens: int,
    sampling: sampling_settings.Sampling,
    timeout_s: float,
    variant_base: int = 0,
    ignore_eos: bool = False,
) -> tuple[list[RequestResult], float]:
    """``count`` requests through ``concurrency`` closed-loop workers; results and wall seconds."""
    results: list[RequestResult | None] = [None] * count
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            results[i] = await stream_chat(
                session, endpoint, prompt.messages(variant_base + i), max_tokens=max_tokens,
                temperature=sampling.temperature, top_p=sampling.top_p, timeout_s=timeout_s,
                extra={"ignore_eos": True} if ignore_eos else None,
            )

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    wall = time.perf_counter() - start
    done = [r for r in results if r is not None]
    return done, wall


def _empty_cell(context: int, concurrency: int, status: str, reason: str | None) -> dict[str, Any]:
    return {
        "context": context,
        "concurrency": concurrency,
        "status": status,
        "reason": reason,
        "repeats": [],
        "median": None,
        "cv": {"output_tps": None},
        "noisy": False,
        "repeats_ok": 0,
        "repeats_failed": [],
        "errors": 0,
        "requests": 0,
    }


@dataclasses.dataclass
class _Repeats:
    """A cell's repeats: each one's figures, its counter delta, the successful requests of the ok ones, and
    why the server was lost (None: it answered throughout)."""

    repeats: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    deltas: list[counters.CounterDelta] = dataclasses.field(default_factory=list)
    counted: list[RequestResult] = dataclasses.field(default_factory=list)
    lost: str | None = None


async def _measure_repeats(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    settings: BenchSettings,
    prompt: BuiltPrompt,
    *,
    requests: int,
    concurrency: int,
    flush: Callable[[], Awaitable[None]],
) -> _Repeats:
    """Run the cell's repeats (each after a cache flush, with the server's counters read around it); stop at
    the first repeat after which the server no longer answers."""
    out = _Repeats()
    for index in range(settings.repeats):
        await flush()
        identity = await server_identity(session, endpoint)
        before = await counters.read_settled(session, endpoint)
        results, wall = await run_requests(
            session, endpoint, prompt, count=requests, concurrency=concurrency, max_tokens=settings.max_tokens,
            sampling=settings.sampling, timeout_s=settings.request_timeout_s, ignore_eos=settings.ignore_eos,
        )
        after = await counters.read_settled(session, endpoint)
        delta = counters.delta(before, after)
        trouble = await repeat_trouble(session, endpoint, results, before, after, identity=identity)
        figures = repeat_figures(results, wall, delta, error_budget=settings.error_budget,
                                 trouble=None if trouble is None else trouble.reason)  # fmt: skip
        figures["repeat"] = index
        out.repeats.append(figures)
        out.deltas.append(delta)
        if figures["status"] == "ok":
            out.counted += [r for r in results if r.ok]
        elif trouble is not None and trouble.gone:
            out.lost = f"the server stopped answering during repeat {index}: {figures['reason']}"
            break
        elif trouble is None and (why_not := await probe_server(session, endpoint)) is not None:
            out.lost = f"the server stopped answering during repeat {index}: {figures['reason']}; {why_not}"
            break
    return out


async def run_cell(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    settings: BenchSettings,
    builder: PromptBuilder,
    info: ServerInfo | None,
    *,
    context: int,
    concurrency: int,
) -> dict[str, Any]:
    requests = settings.requests_for(concurrency)
    skip = kv_skip_reason(
        context=context, concurrency=concurrency, requests=requests, max_tokens=settings.max_tokens,
        max_total_num_tokens=info.max_total_num_tokens if info else None,
        context_length=info.context_length if info else None,
    )
    if skip:
        return _empty_cell(context, concurrency, "skipped", skip)
    try:
        prompt = await builder.build(context, seed=context)
    except (PromptError, aiohttp.ClientError, TimeoutError) as exc:
        return _empty_cell(context, concurrency, "failed", f"prompt of {context} tokens could not be built: {exc}")
    notes: list[str] = []
    tol = prompt_tolerance(context, abs_tol=settings.prompt_abs_tol, rel_tol=settings.prompt_rel_tol)
    if abs(prompt.expected_prompt_tokens - context) > tol:
        return _empty_cell(context, concurrency, "failed", (
            f"closest prompt the words allow holds {prompt.expected_prompt_tokens} tokens; requested {context} "
            f"(tolerance {tol})"
        ))

    async def flush() -> None:
        if settings.flush_cache:
            why = await flush_cache(session, endpoint)
            if why and why not in notes:
                notes.append(why)

    await flush()
    warm_errors: list[str] = []
    if settings.warmup:
        warm, _ = await run_requests(
            session, endpoint, prompt, count=settings.warmup, concurrency=concurrency,
            max_tokens=min(settings.max_tokens, WARMUP_MAX_TOKENS), sampling=settings.sampling,
            timeout_s=settings.request_timeout_s, variant_base=10_000, ignore_eos=settings.ignore_eos,
        )
        warm_errors = [r.error or "?" for r in warm if not r.ok]
    measured = await _measure_repeats(
        session, endpoint, settings, prompt, requests=requests, concurrency=concurrency, flush=flush
    )
    repeats, lost = measured.repeats, measured.lost
    cell: dict[str, Any] = {
        "context": context,
        "concurrency": concurrency,
        "status": "ok",
        "reason": None,
        "requests_per_repeat": requests,
        "prompt": {
            "target_tokens": context,
            "expected_prompt_tokens": prompt.expected_prompt_tokens,
            "measured_with": prompt.measured_with,
            "template_overhead": prompt.template_overhead,
            "tolerance": tol,
        },
        "warmup": {"requests": settings.warmup, "errors": len(warm_errors)},
        "notes": notes,
        "repeats": repeats,
    }
    cell.update(summarize_cell(repeats, measured.deltas, settings.cv_threshold))
    if lost is not None:
        cell["status"] = "failed"
        cell["reason"] = lost
        cell["server_lost"] = True
        return cell
    failed = [r for r in repeats if r["status"] != "ok"]
    if failed:
        cell["status"] = "failed"
        cell["reason"] = f"{len(failed)}/{len(repeats)} repeats failed (excluded from every figure): " + "; ".join(
            f"repeat {r['repeat']}: {r['reason']}" for r in failed
        )
        return cell
    mark_queued(cell, info.running_cap if info else None)
    mismatch = check_prompt_tokens(
        context, [r.prompt_tokens for r in measured.counted if r.prompt_tokens is not None],
        abs_tol=settings.prompt_abs_tol, rel_tol=settings.prompt_rel_tol,
    )
    if mismatch:
        cell["status"] = "failed"
        cell["reason"] = mismatch
    return cell


async def run_matrix(
    endpoint: Endpoint,
    settings: BenchSettings,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> dict[str, Any]:
    """Run every cell; returns ``{"settings", "engine", "cells", ...}`` (see docs/bench.md)."""
    own = session is None
    if session is None:
        biggest = max(settings.concurrency)
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=biggest + 8))
    started = datetime.datetime.now(datetime.UTC)
    clock = time.perf_counter()
    try:
        info: ServerInfo | None = None
        info_error: str | None = None
        try:
            info = await fetch_server_info(session, endpoint)
        except ServerInfoError as exc:
            info_error = str(exc)
        engine: dict[str, Any] = info.engine_summary() if info else {
            "kind": None, "version": None, "sim_speed": None, "max_total_num_tokens": None,
        }
        engine["server_info_error"] = info_error
        probe = await counters.read_counters(session, endpoint)
        engine["metrics"] = probe.error is None
        engine["metrics_error"] = probe.error
        builder = PromptBuilder(session, endpoint)
        cells: list[dict[str, Any]] = []
        lost_in: str | None = None
        for context in settings.contexts:
            for concurrency in settings.concurrency:
                if lost_in is not None:
                    why = f"not run: the server stopped answering in {lost_in}"
                    cell = _empty_cell(context, concurrency, "failed", why)
                else:
                    try:
                        cell = await run_cell(
                            session, endpoint, settings, builder, info, context=context, concurrency=concurrency
                        )
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        cell = _empty_cell(context, concurrency, "failed", f"{type(exc).__name__}: {exc}")
                    if cell.get("server_lost"):
                        lost_in = f"cell context={context} concurrency={concurrency}"
                cells.append(cell)
                if progress is not None:
                    progress(cell)
    finally:
        if own:
            await session.close()
    failed = [c for c in cells if not cell_ok(c)]
    return {
        "settings": {**settings.as_dict(), "url": endpoint.base_url, "model": endpoint.model},
        "sampling": settings.sampling.as_dict(),
        "engine": engine,
        "status": "failed" if failed or engine.get("kind") is None else "ok",
        "failed_cells": len(failed),
        "server_lost": next((c["reason"] for c in cells if c.get("server_lost")), None),
        "cells": cells,
        "started_at": started.isoformat(timespec="seconds"),
        "wall_s": time.perf_counter() - clock,
    }


def mark_queued(cell: dict[str, Any], cap: int | None) -> None:
    """A cell above the server's running-request cap measured the cap plus a queue, not that
    concurrency: status ``queued`` (left out of every tok/s figure), with the cap and why."""
    cell["running_cap"] = cap
    cell["queued"] = cap is not None and int(cell["concurrency"]) > cap
    if cap is not None and cell["queued"] and cell.get("status") == "ok":
        cell["status"] = "queued"
        cell["reason"] = (
            f"concurrency {cell['concurrency']} is above the server's running-request cap {cap}: "
            f"{int(cell['concurrency']) - cap} requests waited in its queue, so this is not throughput at "
            f"concurrency {cell['concurrency']}"
        )


def cell_ok(cell: dict[str, Any]) -> bool:
    return cell.get("status") in ("ok", "skipped", "queued")
