"""The streaming client against a scripted loopback server (error paths the engine never takes)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from repro_py.bench.client import RequestResult, stream_chat
from repro_py.endpoint import Endpoint


def _chunk(delta: dict[str, object] | None = None, finish: str | None = None, usage: dict[str, int] | None = None,
           ) -> bytes:
    body: dict[str, object] = {"choices": [] if delta is None else [{"index": 0, "delta": delta,
                                                                     "finish_reason": finish}]}
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


SCRIPTS: dict[str, list[bytes]] = {
    "ok": [
        _chunk({"role": "assistant", "content": "", "reasoning_content": None}),
        _chunk({"reasoning_content": "thinking"}),
        _chunk({"reasoning_content": None, "content": "Hello"}),
        _chunk({"reasoning_content": None, "content": " world"}),
        _chunk({"reasoning_content": None}, finish="length"),
        _chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}),
        b"data: [DONE]\n\n",
    ],
    "no_usage": [
        _chunk({"role": "assistant", "content": "hi"}),
        _chunk({}, finish="stop"),
        b"data: [DONE]\n\n",
    ],
    "mid_error": [
        _chunk({"role": "assistant", "content": "hi"}),
        b'data: {"error": {"object": "error", "message": "scheduler died", "code": 500}}\n\n',
    ],
    "abort": [
        _chunk({"role": "assistant", "content": "", "reasoning_content": None}),
        _chunk({"reasoning_content": None, "content": "Hello"}),
        _chunk({"reasoning_content": None}, finish="abort"),
        _chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}),
        b"data: [DONE]\n\n",
    ],
    "not_an_object": [
        _chunk({"role": "assistant", "content": "hi"}),
        b"data: [1, 2, 3]\n\n",
    ],
    "no_done": [
        _chunk({"role": "assistant", "content": "hi"}),
        _chunk({}, finish="stop"),
        _chunk(None, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
    ],
}


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        script = body["messages"][-1]["content"]
        assert body["stream_options"] == {"include_usage": True}
        assert request.headers.get("Authorization") == "Bearer k"
        if script == "http_500":
            return web.json_response({"error": {"message": "boom"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in SCRIPTS[script]:
            await resp.write(part)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    srv = TestServer(app, host="127.0.0.1")
    await srv.start_server()
    yield srv
    await srv.close()


async def _run(server: TestServer, script: str) -> RequestResult:
    ep = Endpoint(str(server.make_url("")), api_key="k")
    async with aiohttp.ClientSession() as session:
        return await stream_chat(session, ep, [{"role": "user", "content": script}], max_tokens=8, keep_text=True)


async def test_ok_stream(server: TestServer) -> None:
    res = await _run(server, "ok")
    assert res.ok, res.error
    assert res.output_tokens == 4 and res.prompt_tokens == 11
    assert res.finish_reason == "length"
    assert res.ttft_s is not None and len(res.itl_s) == 2
    assert res.content == "Hello world" and res.reasoning == "thinking"
    # per token: (last text chunk - first text chunk) / (4 tokens - 1), the sum of the chunk gaps over 3
    assert res.itl_token_s == pytest.approx(sum(res.itl_s) / 3)


async def test_an_aborted_generation_is_a_failed_request(server: TestServer) -> None:
    """finish_reason "abort" (sglang's graceful abort) ends a well-formed stream, and still is no success."""
    res = await _run(server, "abort")
    assert not res.ok
    assert "finish_reason 'abort'" in (res.error or "")
    assert res.output_tps is None  # its partial tokens count nowhere


@pytest.mark.parametrize(("script", "needle"), [
    ("http_500", "HTTP 500"),
    ("no_usage", "without a usage chunk"),
    ("mid_error", "scheduler died"),
    ("no_done", "without data: [DONE]"),
    ("not_an_object", "malformed stream chunk"),
])
async def test_errors_are_counted_not_raised(server: TestServer, script: str, needle: str) -> None:
    res = await _run(server, script)
    assert not res.ok
    assert needle in (res.error or "")


async def test_connection_refused() -> None:
    ep = Endpoint("http://127.0.0.1:9")
    async with aiohttp.ClientSession() as session:
        res = await stream_chat(session, ep, [{"role": "user", "content": "x"}], max_tokens=8)
    assert not res.ok and res.error
