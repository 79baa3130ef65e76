"""The OpenAI-compatible generation routes: /v1/chat/completions and /v1/completions, whole or streamed (SSE),
in sglang 0.5.23's JSON shapes."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from aiohttp import web

from repro_py.simengine import intake, textgen, tokenizer, validation
from repro_py.simengine import openai_shapes as shapes
from repro_py.simengine.generation import Generation
from repro_py.simengine.httputil import BadRequest, validated_body
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.httputil import openai_error as _openai_error
from repro_py.simengine.scheduler import Request


def _aborted(req: Request) -> bool:
    """The error fault ended the request: it answers with an error, not with its text."""
    return req.fault == "error" and req.finish_reason == "abort"


@dataclasses.dataclass(frozen=True)
class _ChatReply:
    """One chat completion's reply: its id, model and creation time, and whether the reasoning is parsed."""

    req: Request
    rid: str
    model: Any
    created: int
    parse: bool

    def reasoning_count(self, text: str) -> int | None:
        reasoning = textgen.split_reasoning(text)[0] if self.parse else None
        return tokenizer.count(reasoning) if reasoning is not None else None

    def whole(self) -> dict[str, Any]:
        """The non-streamed reply."""
        req = self.req
        text = "".join(req.plan.pieces[: req.emitted])
        reasoning, content = textgen.split_reasoning(text) if self.parse else (None, text)
        fr, matched = shapes.finish_reason(req)
        return {
            "id": self.rid,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content, "reasoning_content": reasoning},
                    "logprobs": None,
                    "finish_reason": fr,
                    "matched_stop": matched,
                }
            ],
            "usage": shapes.usage(req, self.reasoning_count(text)),
            "metadata": {"weight_version": "default"},
        }

    def chunk(
        self,
        delta: dict[str, Any],
        fr: str | None = None,
        matched: int | str | None = None,
        running_usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr, "matched_stop": matched}],
        }
        if running_usage is not None:  # continuous_usage_stats: every text chunk carries the running totals
            out["usage"] = running_usage
        return out

    def usage_chunk(self, text: str) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": shapes.usage(self.req, self.reasoning_count(text)),
        }


def _completion(req: Request, created: int, model: Any, choice: dict[str, Any]) -> dict[str, Any]:
    """A text completion (or one chunk of it) with one choice; ``usage`` is the caller's."""
    return {
        "id": req.rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, **choice}],
    }


class OpenAIRoutes:
    """The handlers of /v1/chat/completions and /v1/completions on one engine."""

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.settings = gen.settings

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.CHAT_PATH)
        if isinstance(body, web.Response):
            return body
        try:
            req = self.gen.start(intake.chat(self.settings, body))
        except BadRequest as exc:
            return _openai_error(str(exc))
        reply = _ChatReply(
            req, str(body.get("rid") or req.rid), body.get("model") or "default", int(time.time()),
            self.settings.reasoning_parser is not None,
        )  # fmt: skip
        if req.streaming:
            return await self._chat_stream(request, body, reply)
        await self.gen.drain(req, request)
        if _aborted(req):
            return _openai_error(self.gen.fault_message(req), 500, "InternalServerError")
        return _json(reply.whole())

    async def _chat_stream(
        self, request: web.Request, body: dict[str, Any], reply: _ChatReply
    ) -> web.StreamResponse:
        req = reply.req
        include_usage, continuous = self.gen.stream_flags(body)
        resp = await shapes.sse_start(request)
        await shapes.send(resp, reply.chunk({"reasoning_content": None, "role": "assistant", "content": ""}))
        text = ""
        delta: dict[str, Any]
        sent_reasoning = 0
        sent_content = 0
        async for pieces in self.gen.chunks(req, request):
            text += "".join(pieces)
            now = shapes.usage(req, reply.reasoning_count(text), completion_tokens=req.emitted) if continuous else None
            if reply.parse:
                reasoning, content = textgen.split_reasoning(text)
                if reasoning is not None and len(reasoning) > sent_reasoning:
                    delta = {"reasoning_content": reasoning[sent_reasoning:]}
                    await shapes.send(resp, reply.chunk(delta, running_usage=now))
                    sent_reasoning = len(reasoning)
                if len(content) > sent_content:
                    delta = {"reasoning_content": None, "content": content[sent_content:]}
                    await shapes.send(resp, reply.chunk(delta, running_usage=now))
                    sent_content = len(content)
            else:
                delta = {"reasoning_content": None, "content": "".join(pieces)}
                await shapes.send(resp, reply.chunk(delta, running_usage=now))
        if _aborted(req):
            await shapes.send(resp, self.gen.stream_error(req))  # sglang: break out, then the usage chunk and [DONE]
        else:
            fr, matched = shapes.finish_reason(req)
            await shapes.send(resp, reply.chunk({"reasoning_content": None}, fr, matched))
        if include_usage:
            await shapes.send(resp, reply.usage_chunk(text))
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.COMPLETIONS_PATH)
        if isinstance(body, web.Response):
            return body
        try:
            req = self.gen.start(intake.completion(self.settings, body))
        except BadRequest as exc:
            return _openai_error(str(exc))
        model = body.get("model") or "default"
        created = int(time.time())
        if req.streaming:
            return await self._completions_stream(request, body, req, created, model)
        await self.gen.drain(req, request)
        if _aborted(req):
            return _openai_error(self.gen.fault_message(req), 500, "InternalServerError")
        fr, matched = shapes.finish_reason(req)
        text = "".join(req.plan.pieces[: req.emitted])
        choice = {"text": text, "logprobs": None, "finish_reason": fr, "matched_stop": matched}
        return _json(
            {
                **_completion(req, created, model, choice),
                "usage": shapes.usage(req, None),
                "metadata": {"weight_version": "default"},
            }
        )

    async def _completions_stream(
        self, request: web.Request, body: dict[str, Any], req: Request, created: int, model: Any
    ) -> web.StreamResponse:
        include_usage, continuous = self.gen.stream_flags(body)
        resp = await shapes.sse_start(request)
        async for pieces in self.gen.chunks(req, request):
            last = shapes.is_last(req)
            if last and _aborted(req):
                await shapes.send(resp, self.gen.stream_error(req))
                break
            end = shapes.finish_reason(req) if last else (None, None)
            # serving_completions: CompletionStreamResponse.model_dump_json(), so "usage" is always there
            # (null unless continuous_usage_stats asks for the running totals)
            choice = {"text": "".join(pieces), "logprobs": None, "finish_reason": end[0], "matched_stop": end[1]}
            usage = shapes.usage(req, None) if continuous else None
            await shapes.send(resp, {**_completion(req, created, model, choice), "usage": usage})
        if include_usage:
            u = {k: v for k, v in shapes.usage(req, None).items() if v is not None}  # exclude_none=True in sglang
            await shapes.send(resp, {**_completion(req, created, model, {}), "choices": [], "usage": u})
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp
