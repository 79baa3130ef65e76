"""One streaming chat completion, timed.

Time to first token (TTFT) is measured to the first chunk that carries text
(reasoning or content); the role-only opening chunk does not count. Two
inter-token latencies are kept, labelled by what they divide:

- per chunk (``itl_s``): the gaps between successive text-carrying chunks. With
  speculative decoding one chunk carries several tokens, so these are
  inter-chunk gaps;
- per token (``itl_token_s``): (last text chunk - first text chunk) /
  (completion tokens - 1), the request's time per output token as sglang's
  ``request_time_per_output_token`` histogram, AIPerf and guidellm define it.

Output and prompt token counts come from the server's ``usage`` (requested
with ``stream_options.include_usage``), never from counting chunks. A request
counts as finished normally only with ``finish_reason`` ``stop`` or ``length``;
``abort`` (or anything else), an error event, a timeout, a missing usage chunk
or ``[DONE]`` makes it a failed request, whose tokens count nowhere; one whose
connection failed or was cut is marked ``lost`` (the server stopped answering).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint

CHAT_PATH = "/v1/chat/completions"
NORMAL_FINISH = ("stop", "length")


@dataclasses.dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    start: float = 0.0
    end: float = 0.0
    ttft_s: float | None = None
    itl_s: list[float] = dataclasses.field(default_factory=list)
    first_text_at: float | None = None
    last_text_at: float | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    content: str = ""
    reasoning: str = ""
    saw_reasoning_field: bool = False
    lost: bool = False  # the connection failed or was cut: the server stopped answering this request

    @property
    def latency_s(self) -> float:
        return self.end - self.start

    @property
    def itl_token_s(self) -> float | None:
        """Time per output token after the first: (last text chunk - first) / (completion tokens - 1)."""
        if self.first_text_at is None or self.last_text_at is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.last_text_at - self.first_text_at) / (self.output_tokens - 1)

    @property
    def output_tps(self) -> float | None:
        """Output tokens over end-to-end latency (what a single user sees)."""
        if not self.ok or not self.output_tokens or self.latency_s <= 0:
            return None
        return self.output_tokens / self.latency_s


def chat_body(
    endpoint: Endpoint,
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    stream: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if extra:
        body.update(extra)
    return body


def _error_text(obj: object) -> str:
    if isinstance(obj, dict):
        msg = obj.get("message")
        if msg:
            return str(msg)
    return json.dumps(obj)[:300]


async def stream_chat(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    messages: list[dict[str, str]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    timeout_s: float = 600.0,
    keep_text: bool = False,
    extra: dict[str, Any] | None = None,
) -> RequestResult:
    """Send one streaming chat completion and time it. Never raises for server or network errors."""
    res = RequestResult()
    body = chat_body(endpoint, messages, max_tokens=max_tokens, temperature=temperature, top_p=top_p, extra=extra)
    payload = json.dumps(body).encode()
    headers = endpoint.headers(json_body=True)
    clock = time.perf_counter
    res.start = clock()
    usage_seen = False
    done_seen = False
    try:
        async with session.post(
            endpoint.url(CHAT_PATH), data=payload, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            res.status = resp.status
            if resp.status != 200:
                text = await resp.text()
                res.error = f"HTTP {resp.status}: {text[:300]}"
                res.end = clock()
                return res
            async for raw in resp.content:
                if not raw.startswith(b"data:"):
                    continue
                data = raw[5:].strip()
                if data == b"[DONE]":
                    done_seen = True
                    break
                if not data:
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = f"stream error: {_error_text(chunk['error'])}"
                    break
                usage = chunk.get("usage")
                if usage:
                    usage_seen = True
                    res.output_tokens = usage.get("completion_tokens")
                    res.prompt_tokens = usage.get("prompt_tokens")
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    got_text = False
                    ctext = delta.get("content")
                    if ctext:
                        got_text = True
                        if keep_text:
                            res.content += ctext
                    if "reasoning_content" in delta:
                        res.saw_reasoning_field = True
                    rtext = delta.get("reasoning_content")
                    if rtext:
                        got_text = True
                        if keep_text:
                            res.reasoning += rtext
                    if got_text:
                        now = clock()
                        if res.last_text_at is None:
                            res.ttft_s = now - res.start
                            res.first_text_at = now
                        else:
                            res.itl_s.append(now - res.last_text_at)
                        res.last_text_at = now
                    finish = choice.get("finish_reason")
                    if finish:
                        res.finish_reason = str(finish)
    except TimeoutError:
        res.error = f"timed out after {timeout_s:g}s"
    except aiohttp.ClientError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
        res.lost = isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError)
    except (ValueError, UnicodeDecodeError, AttributeError, TypeError, KeyError) as exc:
        res.error = f"malformed stream chunk: {type(exc).__name__}: {exc}"
    res.end = clock()
    if res.error is None:
        if not usage_seen:
            res.error = "stream ended without a usage chunk (stream_options.include_usage ignored?)"
        elif not done_seen:
            res.error = "stream ended without data: [DONE]"
        elif res.finish_reason is None:
            res.error = "stream ended without a finish_reason"
        elif res.finish_reason not in NORMAL_FINISH:
            res.error = (
                f"finish_reason {res.finish_reason!r}: the server ended the generation abnormally "
                f"({res.output_tokens} tokens out); only {' or '.join(NORMAL_FINISH)} count"
            )
        else:
            res.ok = True
    return res
