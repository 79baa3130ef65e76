"""Generation: an admitted request handed to the scheduler, and its token chunks as the scheduler makes them.

The routes that serve it are :mod:`repro_py.simengine.openai_routes` (/v1/chat/completions, /v1/completions) and
:mod:`repro_py.simengine.generate_route` (/generate); :func:`repro_py.simengine.server.build_app` registers them.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from repro_py.simengine import intake, sampling, textgen, tokenizer, word_sampling
from repro_py.simengine import openai_shapes as shapes
from repro_py.simengine.httputil import BadRequest, crash
from repro_py.simengine.scheduler import Request
from repro_py.simengine.state import EngineState

WARMUP_PROMPT = "The capital city of France is"


class Generation:
    """Starts generation requests on one engine's scheduler and streams their chunks back."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self.settings = state.settings
        self._unseeded: collections.Counter[str] = collections.Counter()

    def _seed(self, admitted: intake.Admitted, max_tokens: int, drawn: word_sampling.Processing | None) -> int | None:
        """The request's seed, or the one ``--sim-seed`` gives a sampled request that carries none.

        sglang draws such a request from its generator's running state; here the n-th request of the same
        prompt and parameters (the bonus-unadjusted fault among them) on an engine with the same ``--sim-seed``
        and speculative config draws from seed ``hash(sim seed, config, request, n)``: every draw is new, and
        identical requests are interchangeable, so the samples a launch gives for a set of requests do not
        depend on the order concurrency brings them in (a rehearsal and a test are reproducible), while two
        configs draw independently of each other (the sampled gate compares them)."""
        own = admitted.params.sampling_seed
        if isinstance(own, int):
            return own
        if drawn is None:  # greedy: no draw
            return None
        params = admitted.params
        key = repr((admitted.prompt_key, admitted.problem_source, admitted.thinking, max_tokens, drawn,
                    params.stop_strs, bool(params.ignore_eos)))  # fmt: skip
        nth = self._unseeded[key]
        self._unseeded[key] = nth + 1
        return textgen.derive_seed(self.settings.seed, self.settings.spec, key, nth)  # textgen adds the model's name

    def start(self, admitted: intake.Admitted, *, internal: bool = False) -> Request:
        """Hand an admitted request to the scheduler. Only here does it count as a generation request (for
        ``crash-after:N`` and the request faults): a refused one never reaches this point."""
        state, settings = self.state, self.settings
        fault: str | None = None
        max_tokens = admitted.max_tokens(settings.context_length)
        need = admitted.prompt_tokens + max_tokens
        if not internal and need > settings.kv_tokens:  # the simulated KV cache: sglang's scheduler would abort it
            raise BadRequest(
                f"The request needs {need} KV tokens; the KV cache holds max_total_num_tokens={settings.kv_tokens}."
            )
        if not internal:
            faults = settings.faults
            if faults.crash_after is not None and state.generation_requests >= faults.crash_after:
                crash(
                    f"crash-after:{faults.crash_after}: the scheduler died after serving "
                    f"{state.generation_requests} generation requests"
                )
            fault = faults.request_fault(state.generation_requests)
            state.generation_requests += 1
        params = admitted.params
        garble = state.model_cfg.verify_width if settings.mask_offset_active else None
        drawn = self._drawn(admitted)
        plan = textgen.plan(
            admitted.prompt_key,
            model=settings.served_model_name,
            max_tokens=max_tokens,
            temperature=admitted.temperature,
            seed=self._seed(admitted, max_tokens, drawn),
            stop=params.stop_strs or None,
            ignore_eos=bool(params.ignore_eos),
            thinking=admitted.thinking,
            garble_width=garble,
            problem_source=admitted.problem_source,
            sampling=drawn,
        )
        req = Request(
            rid=uuid.uuid4().hex,
            prompt_tokens=admitted.prompt_tokens,
            plan=plan,
            streaming=admitted.streaming,
            internal=internal,
            temperature=admitted.temperature,
        )
        if fault is not None:
            req.fault = fault
            req.stop_at = max(1, len(plan.pieces) // 2)
        state.scheduler.submit(req)
        return req

    def _drawn(self, admitted: intake.Admitted) -> word_sampling.Processing | None:
        """How a sampled request's words are drawn: verified as this server verifies them (None: greedy)."""
        settings, params = self.settings, admitted.params
        spec = settings.spec
        if admitted.temperature > 0:
            return word_sampling.Processing(
                temperature=admitted.temperature, top_p=float(params.top_p), top_k=int(params.top_k),
                min_p=float(params.min_p), bonus_unadjusted=settings.bonus_unadjusted_active,
                children=0 if spec.algorithm == "none" else (spec.topk or 1) if settings.tree_mode else 1,
            )  # fmt: skip
        return None

    async def chunks(self, req: Request, request: web.Request) -> AsyncIterator[list[str]]:
        """The request's token chunks as the scheduler makes them; a stalled request (the stall
        fault, marked by an empty chunk) yields nothing more and ends when its client goes away."""
        state = self.state
        state.in_flight += 1
        try:
            while True:
                item = await req.queue.get()
                if item is None:
                    return
                if not item:
                    await shapes.wait_disconnect(request)
                    raise asyncio.CancelledError  # the client gave up on the stalled request
                yield item
        finally:
            state.in_flight -= 1
            if not req.finished:
                state.scheduler.cancel(req)

    async def drain(self, req: Request, request: web.Request) -> None:
        """Wait until a non-streaming request has its whole output."""
        async for _ in self.chunks(req, request):
            pass

    def fault_message(self, req: Request) -> str:
        return shapes.fault_message(req, self.settings.faults.specs)

    def stream_error(self, req: Request) -> dict[str, Any]:
        return shapes.stream_error(self.fault_message(req))

    def stream_flags(self, body: dict[str, Any]) -> tuple[bool, bool]:
        return shapes.stream_flags(body, include_usage_default=self.settings.include_usage_default)

    def warmup_starter(self) -> Callable[[], Request]:
        """The starter of the warmup request (greedy, 8 tokens, never counted as a generation request)."""
        warmup_params = sampling.SamplingParams.build({"temperature": 0, "max_new_tokens": 8})
        warmup = intake.Admitted(WARMUP_PROMPT, tokenizer.count(WARMUP_PROMPT), warmup_params, streaming=False)
        return lambda: self.start(warmup, internal=True)


async def wait_warmup(req: Request) -> None:
    while await req.queue.get() is not None:
        pass
