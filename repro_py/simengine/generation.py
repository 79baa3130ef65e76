"""Generation endpoints: /v1/chat/completions, /v1/completions, /generate (stream and not)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from repro_py.simengine import textgen, tokenizer
from repro_py.simengine.httputil import BadRequest, crash
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.httputil import openai_error as _openai_error
from repro_py.simengine.httputil import read_json as _read_json
from repro_py.simengine.scheduler import Request
from repro_py.simengine.state import EngineState

WARMUP_PROMPT = "The capital city of France is"


def add_generation_routes(app: web.Application, state: EngineState) -> Callable[[], Request]:
    """Register the generation routes; return the starter of the warmup request."""
    settings = state.settings

    def start_generation(
        prompt_key: str,
        *,
        max_tokens: int | None,
        sampling: dict[str, Any],
        streaming: bool,
        thinking: bool = True,
        problem_source: str | None = None,
        internal: bool = False,
    ) -> Request:
        if not internal:
            faults = settings.faults
            if faults.crash_after is not None and state.generation_requests >= faults.crash_after:
                crash(
                    f"crash-after:{faults.crash_after}: the scheduler died after serving "
                    f"{state.generation_requests} generation requests"
                )
            state.generation_requests += 1
        prompt_tokens = tokenizer.count(prompt_key)
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)):
            raise BadRequest(f"max_tokens must be an integer, got {max_tokens!r}.")
        if max_tokens is None:
            max_tokens = max(1, settings.context_length - prompt_tokens)
        if max_tokens < 0:
            raise BadRequest(f"max_tokens must be at least 0, got {max_tokens}.")
        if prompt_tokens + max_tokens > settings.context_length:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {settings.context_length} "
                f"tokens. You requested a total of {prompt_tokens + max_tokens} tokens: {prompt_tokens} tokens from "
                f"the input messages and {max_tokens} tokens for the completion. Please reduce the number of tokens "
                "in the input messages or the completion to fit within the limit."
            )
        if prompt_tokens + max_tokens > settings.kv_tokens:
            raise BadRequest(
                f"The request needs {prompt_tokens + max_tokens} KV tokens; the KV cache holds "
                f"max_total_num_tokens={settings.kv_tokens}."
            )
        temperature = float(sampling.get("temperature") or 0.0)
        seed = sampling.get("seed")
        stop = sampling.get("stop")
        stops = [stop] if isinstance(stop, str) else [str(s) for s in stop] if isinstance(stop, list) else None
        garble = state.model_cfg.verify_width if settings.mask_offset_active else None
        plan = textgen.plan(
            prompt_key,
            model=settings.served_model_name,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=int(seed) if isinstance(seed, int) else None,
            stop=stops,
            ignore_eos=bool(sampling.get("ignore_eos", False)),
            thinking=thinking,
            garble_width=garble,
            problem_source=problem_source,
        )
        req = Request(
            rid=uuid.uuid4().hex, prompt_tokens=prompt_tokens, plan=plan, streaming=streaming, internal=internal
        )
        state.scheduler.submit(req)
        return req

    async def chunks(req: Request) -> AsyncIterator[list[str]]:
        state.in_flight += 1
        try:
            while True:
                item = await req.queue.get()
                if item is None:
                    return
                yield item
        finally:
            state.in_flight -= 1
            if not req.finished:
                req.cancelled = True

    def usage(req: Request, reasoning_tokens: int | None) -> dict[str, Any]:
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.emitted,
            "completion_tokens": req.emitted,
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
            "completion_tokens_details": None if reasoning_tokens is None else {"reasoning_tokens": reasoning_tokens},
        }

    def finish_reason(req: Request) -> tuple[str, int | str | None]:
        return req.plan.finish, req.plan.matched_stop

    async def sse_start(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    async def send(resp: web.StreamResponse, data: Any) -> None:
        await resp.write(b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n")

    def render_chat(messages: list[Any]) -> tuple[str, str]:
        parts: list[str] = []
        last_user = ""
        for m in messages:
            if not isinstance(m, dict):
                raise BadRequest("messages must be a list of objects")
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            text = "" if content is None else str(content)
            role = str(m.get("role", "user"))
            if role == "user":
                last_user = text
            parts.append(f"<|im_{role}|>{role}<|im_middle|>{text}<|im_end|>")
        parts.append("<|im_assistant|>assistant<|im_middle|>")
        return "".join(parts), last_user

    async def chat(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _openai_error("Unsupported Media Type: Only 'application/json' is allowed", 400)
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _openai_error("messages must be a non-empty list")
        try:
            prompt_key, last_user = render_chat(messages)
            kwargs = body.get("chat_template_kwargs") or {}
            thinking = not (isinstance(kwargs, dict) and kwargs.get("thinking") is False)
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            streaming = bool(body.get("stream", False))
            req = start_generation(
                prompt_key,
                max_tokens=max_tokens,
                sampling=body,
                streaming=streaming,
                thinking=thinking,
                problem_source=last_user,
            )
        except BadRequest as exc:
            return _openai_error(str(exc))
        model = body.get("model") or "default"
        rid = str(body.get("rid") or req.rid)
        created = int(time.time())
        parse = settings.reasoning_parser is not None
        if not streaming:
            async for _ in chunks(req):
                pass
            text = "".join(req.plan.pieces[: req.emitted])
            reasoning, content = textgen.split_reasoning(text) if parse else (None, text)
            fr, matched = finish_reason(req)
            r_tokens = tokenizer.count(reasoning) if reasoning is not None else None
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
                    "usage": usage(req, r_tokens),
                    "metadata": {"weight_version": "default"},
                }
            )
        resp = await sse_start(request)

        def chunk(delta: dict[str, Any], fr: str | None = None, matched: int | str | None = None) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr, "matched_stop": matched}
                ],
            }

        await send(resp, chunk({"reasoning_content": None, "role": "assistant", "content": ""}))
        text = ""
        sent_reasoning = 0
        sent_content = 0
        async for pieces in chunks(req):
            text += "".join(pieces)
            if parse:
                reasoning, content = textgen.split_reasoning(text)
                if reasoning is not None and len(reasoning) > sent_reasoning:
                    await send(resp, chunk({"reasoning_content": reasoning[sent_reasoning:]}))
                    sent_reasoning = len(reasoning)
                if len(content) > sent_content:
                    await send(resp, chunk({"reasoning_content": None, "content": content[sent_content:]}))
                    sent_content = len(content)
            else:
                await send(resp, chunk({"reasoning_content": None, "content": "".join(pieces)}))
        fr, matched = finish_reason(req)
        await send(resp, chunk({"reasoning_content": None}, fr, matched))
        options = body.get("stream_options") or {}
        if settings.include_usage_default or (isinstance(options, dict) and options.get("include_usage")):
            r_tokens = None
            if parse:
                reasoning, _ = textgen.split_reasoning(text)
                r_tokens = tokenizer.count(reasoning) if reasoning is not None else None
            await send(
                resp,
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage(req, r_tokens),
                },
            )
        await send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _openai_error("Unsupported Media Type: Only 'application/json' is allowed", 400)
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            prompt = json.dumps(prompt)
        streaming = bool(body.get("stream", False))
        try:
            req = start_generation(prompt, max_tokens=body.get("max_tokens", 16), sampling=body, streaming=streaming)
        except BadRequest as exc:
            return _openai_error(str(exc))
        model = body.get("model") or "default"
        created = int(time.time())
        if not streaming:
            async for _ in chunks(req):
                pass
            fr, matched = finish_reason(req)
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
                    "usage": usage(req, None),
                    "metadata": {"weight_version": "default"},
                }
            )
        resp = await sse_start(request)
        async for pieces in chunks(req):
            await send(
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
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ],
                },
            )
        fr, matched = finish_reason(req)
        await send(
            resp,
            {
                "id": req.rid,
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": fr, "matched_stop": matched}],
            },
        )
        options = body.get("stream_options") or {}
        if settings.include_usage_default or (isinstance(options, dict) and options.get("include_usage")):
            u = {k: v for k, v in usage(req, None).items() if v is not None}
            await send(
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
        await send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    def meta_info(req: Request, done: bool) -> dict[str, Any]:
        fr: dict[str, Any] | None = None
        if done:
            fr = (
                {"type": "length", "length": req.emitted}
                if req.plan.finish == "length"
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
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        text = body.get("text")
        if text is None and isinstance(body.get("input_ids"), list):
            text = " ".join(str(i) for i in body["input_ids"])
        if not isinstance(text, str):
            return _json({"error": {"message": "text (a string) or input_ids is required"}}, 400)
        sampling = body.get("sampling_params") or {}
        if not isinstance(sampling, dict):
            return _json({"error": {"message": "sampling_params must be an object"}}, 400)
        streaming = bool(body.get("stream", False))
        sp = dict(sampling)
        if "sampling_seed" in sp:
            sp["seed"] = sp["sampling_seed"]
        try:
            req = start_generation(
                text, max_tokens=sampling.get("max_new_tokens", 128), sampling=sp, streaming=streaming
            )
        except BadRequest as exc:
            return _json({"error": {"message": str(exc)}}, 400)
        if body.get("rid"):
            req.rid = str(body["rid"])
        if not streaming:
            async for _ in chunks(req):
                pass
            out = req.plan.pieces[: req.emitted]
            return _json(
                {
                    "text": "".join(out),
                    "output_ids": [tokenizer.token_id(p) for p in out],
                    "meta_info": meta_info(req, True),
                }
            )
        resp = await sse_start(request)
        acc = ""
        ids: list[int] = []
        async for pieces in chunks(req):
            acc += "".join(pieces)
            ids += [tokenizer.token_id(p) for p in pieces]
            done = req.finished and req.queue.empty()
            await send(resp, {"text": acc, "output_ids": ids, "meta_info": meta_info(req, done)})
        await send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    r = app.router
    r.add_post("/v1/chat/completions", chat)
    r.add_post("/v1/completions", completions)
    r.add_post("/generate", generate)
    r.add_put("/generate", generate)
    return lambda: start_generation(
        WARMUP_PROMPT, max_tokens=8, sampling={"temperature": 0}, streaming=False, internal=True
    )


async def wait_warmup(req: Request) -> None:
    while await req.queue.get() is not None:
        pass
