"""Generation endpoints: /v1/chat/completions, /v1/completions, /generate (stream and not)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from repro_py.simengine import contract, intake, sampling, textgen, tokenizer, validation, word_sampling
from repro_py.simengine import openai_shapes as shapes
from repro_py.simengine.httputil import BadRequest, crash, validated_body
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.httputil import openai_error as _openai_error
from repro_py.simengine.scheduler import Request
from repro_py.simengine.state import EngineState

WARMUP_PROMPT = "The capital city of France is"


def add_generation_routes(app: web.Application, state: EngineState) -> Callable[[], Request]:
    """Register the generation routes; return the starter of the warmup request."""
    settings = state.settings

    def start_generation(admitted: intake.Admitted, *, internal: bool = False) -> Request:
        """Hand an admitted request to the scheduler. Only here does it count as a generation request (for
        ``crash-after:N`` and the request faults): a refused one never reaches this point."""
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
        drawn = None  # how a sampled request's words are drawn: verified as this server verifies them
        if admitted.temperature > 0:
            spec = settings.spec
            drawn = word_sampling.Processing(
                temperature=admitted.temperature, top_p=float(params.top_p), top_k=int(params.top_k),
                min_p=float(params.min_p), bonus_unadjusted=settings.bonus_unadjusted_active,
                children=0 if spec.algorithm == "none" else (spec.topk or 1) if settings.tree_mode else 1,
            )  # fmt: skip
        plan = textgen.plan(
            admitted.prompt_key,
            model=settings.served_model_name,
            max_tokens=max_tokens,
            temperature=admitted.temperature,
            seed=params.sampling_seed if isinstance(params.sampling_seed, int) else None,
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

    async def chunks(req: Request, request: web.Request) -> AsyncIterator[list[str]]:
        """The request's token chunks as the scheduler makes them; a stalled request (the stall
        fault, marked by an empty chunk) yields nothing more and ends when its client goes away."""
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

    def fault_message(req: Request) -> str:
        return shapes.fault_message(req, settings.faults.specs)

    def stream_error(req: Request) -> dict[str, Any]:
        return shapes.stream_error(fault_message(req))

    def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
        return shapes.stream_flags(body, include_usage_default=settings.include_usage_default)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.CHAT_PATH)
        if isinstance(body, web.Response):
            return body
        try:
            req = start_generation(intake.chat(settings, body))
        except BadRequest as exc:
            return _openai_error(str(exc))
        streaming = req.streaming
        model = body.get("model") or "default"
        rid = str(body.get("rid") or req.rid)
        created = int(time.time())
        parse = settings.reasoning_parser is not None

        def reasoning_count(text: str) -> int | None:
            reasoning = textgen.split_reasoning(text)[0] if parse else None
            return tokenizer.count(reasoning) if reasoning is not None else None

        if not streaming:
            async for _ in chunks(req, request):
                pass
            if req.fault == "error" and req.finish_reason == "abort":
                return _openai_error(fault_message(req), 500, "InternalServerError")
            text = "".join(req.plan.pieces[: req.emitted])
            reasoning, content = textgen.split_reasoning(text) if parse else (None, text)
            fr, matched = shapes.finish_reason(req)
            return _json(
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content, "reasoning_content": reasoning},
                            "logprobs": None,
                            "finish_reason": fr,
                            "matched_stop": matched,
                        }
                    ],
                    "usage": shapes.usage(req, reasoning_count(text)),
                    "metadata": {"weight_version": "default"},
                }
            )
        include_usage, continuous = stream_flags(body)
        resp = await shapes.sse_start(request)

        def chunk(
            delta: dict[str, Any],
            fr: str | None = None,
            matched: int | str | None = None,
            running_usage: dict[str, Any] | None = None,
        ) -> dict[str, Any]:
            out: dict[str, Any] = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr, "matched_stop": matched}
                ],
            }
            if running_usage is not None:  # continuous_usage_stats: every text chunk carries the running totals
                out["usage"] = running_usage
            return out

        await shapes.send(resp, chunk({"reasoning_content": None, "role": "assistant", "content": ""}))
        text = ""
        sent_reasoning = 0
        sent_content = 0
        async for pieces in chunks(req, request):
            text += "".join(pieces)
            now = shapes.usage(req, reasoning_count(text), completion_tokens=req.emitted) if continuous else None
            if parse:
                reasoning, content = textgen.split_reasoning(text)
                if reasoning is not None and len(reasoning) > sent_reasoning:
                    await shapes.send(resp, chunk({"reasoning_content": reasoning[sent_reasoning:]}, running_usage=now))
                    sent_reasoning = len(reasoning)
                if len(content) > sent_content:
                    await shapes.send(
                        resp, chunk({"reasoning_content": None, "content": content[sent_content:]}, running_usage=now)
                    )
                    sent_content = len(content)
            else:
                delta = {"reasoning_content": None, "content": "".join(pieces)}
                await shapes.send(resp, chunk(delta, running_usage=now))
        if req.fault == "error" and req.finish_reason == "abort":
            await shapes.send(resp, stream_error(req))  # sglang: break out, then the usage chunk and [DONE]
        else:
            fr, matched = shapes.finish_reason(req)
            await shapes.send(resp, chunk({"reasoning_content": None}, fr, matched))
        if include_usage:
            await shapes.send(
                resp,
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": shapes.usage(req, reasoning_count(text)),
                },
            )
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.COMPLETIONS_PATH)
        if isinstance(body, web.Response):
            return body
        try:
            req = start_generation(intake.completion(settings, body))
        except BadRequest as exc:
            return _openai_error(str(exc))
        streaming = req.streaming
        model = body.get("model") or "default"
        created = int(time.time())
        if not streaming:
            async for _ in chunks(req, request):
                pass
            if req.fault == "error" and req.finish_reason == "abort":
                return _openai_error(fault_message(req), 500, "InternalServerError")
            fr, matched = shapes.finish_reason(req)
            return _json(
                {
                    "id": req.rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": "".join(req.plan.pieces[: req.emitted]),
                            "logprobs": None,
                            "finish_reason": fr,
                            "matched_stop": matched,
                        }
                    ],
                    "usage": shapes.usage(req, None),
                    "metadata": {"weight_version": "default"},
                }
            )
        include_usage, continuous = stream_flags(body)
        resp = await shapes.sse_start(request)
        async for pieces in chunks(req, request):
            last = shapes.is_last(req)
            if last and req.fault == "error" and req.finish_reason == "abort":
                await shapes.send(resp, stream_error(req))
                break
            end = shapes.finish_reason(req) if last else (None, None)
            # serving_completions: CompletionStreamResponse.model_dump_json(), so "usage" is always there
            # (null unless continuous_usage_stats asks for the running totals)
            await shapes.send(
                resp,
                {
                    "id": req.rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "text": "".join(pieces),
                            "logprobs": None,
                            "finish_reason": end[0],
                            "matched_stop": end[1],
                        }
                    ],
                    "usage": shapes.usage(req, None) if continuous else None,
                },
            )
        if include_usage:
            u = {k: v for k, v in shapes.usage(req, None).items() if v is not None}  # exclude_none=True in sglang
            await shapes.send(
                resp,
                {
                    "id": req.rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": u,
                },
            )
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    def meta_info(req: Request, done: bool) -> dict[str, Any]:
        fr: dict[str, Any] | None = None
        if done:
            reason = req.finish_reason
            fr = (
                {"type": "abort", "message": fault_message(req)}
                if reason == "abort"
                else {"type": "length", "length": req.emitted}
                if reason == "length"
                else {"type": "stop", "matched": req.plan.matched_stop}
            )
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": fr,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": req.emitted,
            "cached_tokens": 0,
        }
        if done:
            meta["e2e_latency"] = (req.finished_at or time.time()) - req.created
            meta["response_sent_to_client_ts"] = time.time()
            if settings.spec.algorithm != "none" and req.verify_ct > 0:
                drafts = max(1, state.model_cfg.verify_width - 1)
                correct = req.accept_tokens - req.verify_ct
                meta.update(
                    spec_accept_rate=correct / (req.verify_ct * drafts),
                    spec_accept_length=req.emitted / req.verify_ct,
                    spec_num_correct_drafts=correct,
                    spec_num_proposed_drafts=req.verify_ct * drafts,
                    spec_verify_ct=req.verify_ct,
                )
            meta["sim_speed"] = settings.speed
        return meta

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.GENERATE_PATH, content_type=False)
        if isinstance(body, web.Response):
            return body
        violation = contract.generate_contract_error(body)
        if violation is not None:
            return _json({"error": violation}, 400)
        try:
            req = start_generation(intake.generate(settings, body))
        except BadRequest as exc:
            if body.get("stream"):  # sglang's stream_results: the error as an event of a 200 stream
                return await shapes.sse_error_stream(request, str(exc))
            return _json({"error": {"message": str(exc)}}, 400)
        streaming = req.streaming
        if body.get("rid"):
            req.rid = str(body["rid"])
        if not streaming:
            async for _ in chunks(req, request):
                pass
            out = req.plan.pieces[: req.emitted]
            return _json(
                {
                    "text": "".join(out),
                    "output_ids": [tokenizer.token_id(p) for p in out],
                    "meta_info": meta_info(req, True),
                }
            )
        resp = await shapes.sse_start(request)
        acc = ""
        ids: list[int] = []
        async for pieces in chunks(req, request):
            acc += "".join(pieces)
            ids += [tokenizer.token_id(p) for p in pieces]
            done = shapes.is_last(req)
            await shapes.send(resp, {"text": acc, "output_ids": ids, "meta_info": meta_info(req, done)})
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    r = app.router
    r.add_post("/v1/chat/completions", chat)
    r.add_post("/v1/completions", completions)
    r.add_post("/generate", generate)
    r.add_put("/generate", generate)
    warmup_params = sampling.SamplingParams.build({"temperature": 0, "max_new_tokens": 8})
    warmup = intake.Admitted(WARMUP_PROMPT, tokenizer.count(WARMUP_PROMPT), warmup_params, streaming=False)
    return lambda: start_generation(warmup, internal=True)


async def wait_warmup(req: Request) -> None:
    while await req.queue.get() is not None:
        pass
