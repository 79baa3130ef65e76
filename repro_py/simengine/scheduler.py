"""The batched decode loop: one speculative step for every running request, paced by the model.

Each step: admit waiting requests (KV capacity and max running requests
permitting; their prefill joins this step and yields their first token),
then every decoding request draws how many tokens this verify step accepts
(mean = the model's acceptance length for its configuration, context and
temperature: a sampled request accepts less than a greedy one),
and the step takes the model's step time divided by ``--sim-speed``.
Steps are scheduled against an absolute clock, so the pacing lag (how far
the loop runs behind its own model) is measured and reported.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import logging
import random
import time

from repro_py.simengine import perf_model
from repro_py.simengine.metrics import Metrics
from repro_py.simengine.textgen import TextPlan

log = logging.getLogger("repro_py.simengine")


@dataclasses.dataclass(eq=False)
class Request:
    rid: str
    prompt_tokens: int
    plan: TextPlan
    streaming: bool
    internal: bool = False  # the warmup request (counted like any request, as sglang's warmup is)
    temperature: float = 0.0  # the request's sampling temperature (0: greedy), for its acceptance
    queue: asyncio.Queue[list[str] | None] = dataclasses.field(default_factory=asyncio.Queue)
    emitted: int = 0
    verify_ct: int = 0
    accept_tokens: int = 0
    prefilled: bool = False
    cancelled: bool = False
    finished: bool = False
    created: float = dataclasses.field(default_factory=time.time)
    first_token_at: float | None = None
    finished_at: float | None = None
    # the engine's own clock (monotonic) for its latency histograms
    t_created: float = dataclasses.field(default_factory=time.monotonic)
    t_first: float | None = None
    t_last: float | None = None
    # a fault that bites this request once ``stop_at`` tokens are out: "abort" | "error" | "stall"
    fault: str | None = None
    stop_at: int | None = None

    @property
    def stalled(self) -> bool:
        return self.fault == "stall" and self.stop_at is not None and self.emitted >= self.stop_at

    @property
    def finish_reason(self) -> str:
        """``abort`` when an abort or error fault ended it, else the text plan's reason."""
        if self.fault in ("abort", "error") and self.stop_at is not None and self.emitted >= self.stop_at:
            return "abort"
        return self.plan.finish

    @property
    def reserve(self) -> int:
        return self.prompt_tokens + len(self.plan.pieces)

    @property
    def remaining(self) -> int:
        """Tokens still to generate (a fault ends the request early at ``stop_at``)."""
        end = len(self.plan.pieces)
        if self.stop_at is not None and self.fault in ("abort", "error"):
            end = min(end, self.stop_at)
        return end - self.emitted


@dataclasses.dataclass
class Pacing:
    steps: int = 0
    modelled_s: float = 0.0  # sum of modelled step durations (already divided by speed)
    busy_wall_s: float = 0.0
    max_lag_ms: float = 0.0
    last_lag_ms: float = 0.0
    total_lag_ms: float = 0.0
    late_steps: int = 0  # steps that ended more than 5 ms after their scheduled time
    tokens: int = 0

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "modelled_seconds": round(self.modelled_s, 6),
            "busy_wall_seconds": round(self.busy_wall_s, 6),
            "max_lag_ms": round(self.max_lag_ms, 3),
            "last_lag_ms": round(self.last_lag_ms, 3),
            "total_lag_ms": round(self.total_lag_ms, 3),
            "late_steps": self.late_steps,
            "tokens": self.tokens,
        }


class Scheduler:
    def __init__(
        self,
        cfg: perf_model.ModelConfig,
        *,
        speed: float,
        seed: int,
        max_running: int,
        kv_tokens: int,
        metrics: Metrics,
        decode_log_interval: int = 40,
        kv_overrun: bool = False,
    ) -> None:
        self.cfg = cfg
        self.speed = speed
        self.rng = random.Random(seed)
        self.max_running = max_running
        self.kv_tokens = kv_tokens
        self.metrics = metrics
        self.decode_log_interval = decode_log_interval
        self.kv_overrun = kv_overrun  # the kv-overrun fault (faults.py)
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.reserved = 0
        self.pacing = Pacing()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._interval_tokens = 0
        self._interval_start = time.monotonic()
        self._interval_accept = 0
        self._interval_verify = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def active(self) -> int:
        return len(self.waiting) + len(self.running)

    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self._wake.set()

    def cancel(self, req: Request) -> None:
        """The client went away: the next step drops the request (as sglang aborts it)."""
        req.cancelled = True
        self._wake.set()

    @functools.lru_cache(maxsize=512)  # noqa: B019 - one scheduler per process
    def _accept_mean(self, ctx_bucket: int, temperature: float) -> float:
        return perf_model.accept_length(self.cfg, ctx_bucket, temperature)

    def _draw(self, req: Request) -> int:
        kmax = self.cfg.max_accept
        if kmax <= 1:
            return 1
        ctx = req.prompt_tokens + req.emitted
        mean = self._accept_mean(ctx // 256 * 256, round(req.temperature, 2))
        p = (mean - 1.0) / (kmax - 1)
        rnd = self.rng.random
        return 1 + sum(1 for _ in range(kmax - 1) if rnd() < p)

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        while self.waiting and len(self.running) < self.max_running:
            req = self.waiting[0]
            if req.cancelled:
                self.waiting.popleft()
                continue
            if self.reserved + req.reserve > self.kv_tokens and self.running:
                break  # wait for capacity, as sglang's waiting queue does
            self.waiting.popleft()
            self.reserved += req.reserve
            self.running.append(req)
            admitted.append(req)
        return admitted

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        anchor: float | None = None
        modelled = 0.0
        while True:
            if not self.waiting and not self.running:
                if anchor is not None:
                    self.pacing.busy_wall_s += loop.time() - anchor
                anchor = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = loop.time()
            if anchor is None:
                anchor, modelled = now, 0.0
            admitted = self._admit()
            decoding = [r for r in self.running if r.prefilled and not r.cancelled and not r.stalled]
            if not admitted and not decoding and not any(r.cancelled for r in self.running):
                # only stalled requests (the stall fault) are left: idle until something changes
                self.pacing.busy_wall_s += loop.time() - anchor
                anchor = None
                self._wake.clear()
                await self._wake.wait()
                continue
            ms = 0.0
            if decoding:
                ctx = sum(r.prompt_tokens + r.emitted for r in decoding) // len(decoding)
                ms += perf_model.step_ms(self.cfg, len(decoding), ctx)
            if admitted:
                ms += perf_model.prefill_ms(sum(r.prompt_tokens for r in admitted), self.cfg)
            duration = ms / 1000.0 / self.speed
            modelled += duration
            target = anchor + modelled
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            lag_ms = max(0.0, (loop.time() - target) * 1000.0)
            self.pacing.steps += 1
            self.pacing.modelled_s += duration
            self.pacing.last_lag_ms = lag_ms
            self.pacing.max_lag_ms = max(self.pacing.max_lag_ms, lag_ms)
            self.pacing.total_lag_ms += lag_ms
            self.pacing.late_steps += lag_ms > 5.0
            self._emit(admitted, decoding)

    def _emit(self, admitted: list[Request], decoding: list[Request]) -> None:
        now = time.time()
        mono = time.monotonic()
        step_tokens = 0
        if self.kv_overrun and len(decoding) > 1:
            _overrun_neighbours(decoding)
        for req in decoding:
            if req.cancelled:
                continue
            k = min(self._draw(req), req.remaining)
            if req.stop_at is not None and req.fault == "stall":
                k = min(k, req.stop_at - req.emitted)
            if k <= 0:
                continue
            chunk = req.plan.pieces[req.emitted : req.emitted + k]
            req.emitted += k
            if req.t_last is not None:
                self.metrics.observe_chunk(mono - req.t_last, k)
            req.t_last = mono
            req.verify_ct += 1
            req.accept_tokens += k
            self.metrics.spec_total_accept_tokens += k
            self.metrics.spec_total_forward_ct += 1
            self._interval_accept += k
            self._interval_verify += 1
            step_tokens += k
            req.queue.put_nowait(chunk)
            if req.stalled:
                req.queue.put_nowait([])  # the stall fault: the handler sends nothing more
        for req in admitted:
            req.prefilled = True
            req.first_token_at = now
            if req.remaining > 0:
                req.queue.put_nowait(req.plan.pieces[:1])
                req.emitted = 1
                step_tokens += 1
                req.t_first = req.t_last = mono
                self.metrics.observe_first_token(mono - req.t_created, streaming=req.streaming)
                if req.stalled:
                    req.queue.put_nowait([])
        self.pacing.tokens += step_tokens
        self._interval_tokens += step_tokens
        for req in list(self.running):
            if req.cancelled or (req.remaining <= 0 and not req.stalled):
                self._finish(req)
        if decoding and self.pacing.steps % self.decode_log_interval == 0:
            self._log_interval()

    def _finish(self, req: Request) -> None:
        self.running.remove(req)
        self.reserved -= req.reserve
        req.finished = True
        req.finished_at = time.time()
        if req.cancelled or req.finish_reason == "abort":
            self.metrics.observe_aborted()
        if not req.cancelled:
            verify = req.verify_ct if self.cfg.mode != "none" else 0
            mono = time.monotonic()
            self.metrics.observe_finished(
                prompt_tokens=req.prompt_tokens,
                completion_tokens=req.emitted,
                verify_ct=verify,
                streaming=req.streaming,
                e2e_s=mono - req.t_created,
                decode_s=(req.t_last - req.t_first) if req.t_first is not None and req.t_last is not None else None,
            )
        req.queue.put_nowait(None)

    def _log_interval(self) -> None:
        now = time.monotonic()
        elapsed = max(1e-9, now - self._interval_start)
        throughput = self._interval_tokens / elapsed
        m = self.metrics
        m.gen_throughput = throughput
        m.num_running_reqs = len(self.running)
        m.num_queue_reqs = len(self.waiting)
        m.token_usage = self.reserved / self.kv_tokens
        parts = [
            f"Decode batch, #running-req: {len(self.running)}, #token: {self.reserved}, "
            f"token usage: {m.token_usage:.2f}, "
        ]
        if self.cfg.mode != "none" and self._interval_verify:
            acc = self._interval_accept / self._interval_verify
            drafts = max(1, self.cfg.verify_width - 1)
            m.spec_accept_length = acc
            m.spec_accept_rate = (acc - 1.0) / drafts
            parts.append(f"accept len: {acc:.2f}, accept rate: {m.spec_accept_rate:.2f}, ")
        parts.append(
            f"cuda graph: True, gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self.waiting)}, "
            f"(SIMULATED, sim speed {self.speed:g})"
        )
        log.info("".join(parts), extra={"rank": " TP0"})
        self._interval_tokens = 0
        self._interval_accept = 0
        self._interval_verify = 0
        self._interval_start = now


OVERRUN_PIECE = " \u2591"  # what a token read from another request's KV decodes to here


def _overrun_neighbours(decoding: list[Request]) -> None:
    """kv-overrun fault: each request's verify window writes into the next request's KV, so that
    request's next token is wrong. Only requests decoding in the same step are affected."""
    for i in range(len(decoding)):
        victim = decoding[(i + 1) % len(decoding)]
        pos = victim.emitted
        if victim.cancelled or pos >= len(victim.plan.pieces) or victim.plan.pieces[pos] == OVERRUN_PIECE:
            continue
        pieces = list(victim.plan.pieces)
        pieces[pos] = OVERRUN_PIECE
        victim.plan = dataclasses.replace(victim.plan, pieces=pieces)
