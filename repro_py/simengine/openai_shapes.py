"""JSON and SSE shapes of sglang 0.5.23's OpenAI-compatible responses, for the generation routes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from repro_py.simengine.httputil import BadRequest
from repro_py.simengine.scheduler import Request


def is_last(req: Request) -> bool:
    """Whether the chunk just taken is the request's last: the scheduler queues a finished
    request's end marker (None) in the same step as its last tokens, so only it is left."""
    return req.finished and req.queue.qsize() <= 1


def usage(req: Request, reasoning_tokens: int | None, completion_tokens: int | None = None) -> dict[str, Any]:
    """sglang's ``UsageProcessor.calculate_token_usage``: ``reasoning_tokens`` and
    ``completion_tokens_details.reasoning_tokens`` carry the same count (details null when 0)."""
    done = req.emitted if completion_tokens is None else completion_tokens
    reasoning = reasoning_tokens or 0
    return {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + done,
        "completion_tokens": done,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning,
        "completion_tokens_details": {"reasoning_tokens": reasoning} if reasoning else None,
    }


def finish_reason(req: Request) -> tuple[str, int | str | None]:
    """(finish_reason, matched_stop) of a finished request."""
    reason = req.finish_reason
    return reason, (req.plan.matched_stop if reason == "stop" else None)


def fault_message(req: Request, specs: Sequence[str]) -> str:
    return f"SIMULATED fault ({', '.join(specs)}): request {req.rid} failed after {req.emitted} of its tokens"


def stream_error(message: str) -> dict[str, Any]:
    """sglang's mid-stream error event (``create_streaming_error_response`` of an error-status abort)."""
    return {"error": {"object": "error", "message": message, "type": "InternalServerError", "param": None,
                      "code": 500}}


def stream_flags(body: dict[str, Any], *, include_usage_default: bool) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats), as sglang's ``should_include_usage``."""
    options = body.get("stream_options") or {}
    return include_usage_default or bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))


async def wait_disconnect(request: web.Request, poll_s: float = 0.2) -> None:
    """Return once the client has closed the connection (nothing is written to notice it)."""
    # aiohttp offers a handler no disconnect event short of writing, and a stall writes nothing
    while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(poll_s)


async def sse_start(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    return resp


async def sse_error_stream(request: web.Request, message: str) -> web.StreamResponse:
    """``/generate``'s answer to a streamed request the tokenizer manager refused: a 200 stream holding
    sglang's error event (``stream_results``, orjson's compact JSON) and ``[DONE]``."""
    resp = await sse_start(request)
    event = {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}
    await send(resp, json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode())
    await send(resp, b"[DONE]")
    await resp.write_eof()
    return resp


async def send(resp: web.StreamResponse, data: Any) -> None:
    await resp.write(b"data: " + (data if isinstance(data, bytes) else json.dumps(data).encode()) + b"\n\n")


def render_chat(messages: list[Any]) -> tuple[str, str]:
    """The prompt text a chat template would build (Kimi-style markers) and the last user message."""
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
