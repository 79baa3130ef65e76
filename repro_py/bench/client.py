"""One streaming chat completion, timed.

Time to first token (TTFT) is measured to the first chunk that carries text
(reasoning or content); the role-only opening chunk does not count. Inter-token
latency (ITL) is the gap between successive text-carrying chunks: with
speculative decoding one chunk may carry several tokens, so these are
inter-chunk gaps, and the per-request decode rate is reported separately as
output tokens per second. Output and prompt token counts come from the
server's ``usage`` (requested with ``stream_options.include_usage``), never
from counting chunks.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint

CHAT_PATH = "/v1/chat/completions"


@dataclasses.dataclass
class RequestResult:
    ok: bool = False
    error: str | None = None
    start: float = 0.0
    end: float = 0.0
    ttft_s: float | None = None
    itl_s: list[float] = dataclasses.field(default_factory=list)
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    status: int | None = None
    content: str = ""
    reasoning: str = ""
    saw_reasoning_field: bool = False

    @property
    def latency_s(self) -> float:
        return self.end - self.start

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
    stream: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
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
    timeout_s: float = 600.0,
    keep_text: bool = False,
    extra: dict[str, Any] | None = None,
) -> RequestResult:
    """Send one streaming chat completion and time it. Never raises for server or network errors."""
    res = RequestResult()
    body = chat_body(endpoint, messages, max_tokens=max_tokens, temperature=temperature, extra=extra)
    payload = json.dumps(body).encode()
    headers = endpoint.headers(json_body=True)
    clock = time.perf_counter
    res.start = clock()
    last_text_at: float | None = None
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
                        if last_text_at is None:
                            res.ttft_s = now - res.start
                        else:
                            res.itl_s.append(now - last_text_at)
                        last_text_at = now
                    finish = choice.get("finish_reason")
                    if finish:
                        res.finish_reason = str(finish)
    except TimeoutError:
        res.error = f"timed out after {timeout_s:g}s"
    except aiohttp.ClientError as exc:
        res.error = f"{type(exc).__name__}: {exc}"
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
        else:
            res.ok = True
    return res
