"""The losslessness gate is an oracle: it can FAIL, and it refuses to judge what it cannot.

A planted server (an aiohttp app on loopback) answers ``/generate`` with the baseline's own outputs,
except where a test plants a divergence; it records each request body, so what the gate sends is
checked too (``ignore_eos``, a fixed length, temperature 0).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from repro_py.endpoint import Endpoint
from repro_py.gates import serverlog
from repro_py.gates.lossless import PROMPTS, make_reference, reference_problem, run_lossless
from repro_py.gates.lossless_prompts import HALF, SHARED

TOKENS = 16
Plant = Callable[[str, list[int]], list[int]]


def _ids(text: str) -> list[int]:
    """The planted model's greedy output: a fixed function of the prompt, exactly TOKENS long."""
    seed = sum(text.encode())
    return [(seed * (i + 7)) % 50_000 for i in range(TOKENS)]


class Planted:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.plant: Plant = lambda text, ids: ids

    async def generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        ids = self.plant(body["text"], _ids(body["text"]))
        return web.json_response({"text": "", "output_ids": ids, "meta_info": {}})


@pytest.fixture
async def planted() -> AsyncIterator[tuple[Planted, Endpoint]]:
    server = Planted()
    app = web.Application()
    app.router.add_post("/generate", server.generate)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield server, Endpoint(str(test_server.make_url("")).rstrip("/"))
    await test_server.close()


def _reference(**kw: Any) -> dict[str, Any]:
    outputs = {pid: _ids(text) for pid, text in PROMPTS}
    return make_reference(outputs, max_new_tokens=TOKENS, source="baseline", **{"deterministic": True, **kw})


async def _run(endpoint: Endpoint, reference: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"baseline": False, "deterministic": True, "max_new_tokens": TOKENS, **kw}
    async with aiohttp.ClientSession() as session:
        return await run_lossless(session, endpoint, reference, **args)


async def test_identical_outputs_under_deterministic_inference_pass(planted: tuple[Planted, Endpoint]) -> None:
    server, endpoint = planted
    res = await _run(endpoint, _reference())
    assert res["passed"] and res["verdict"] == "lossless", res["reason"]
    assert res["deterministic"] == {"server": True, "reference": True}
    sampling = [b["sampling_params"] for b in server.bodies]
    assert sampling and all(s == {"temperature": 0, "max_new_tokens": TOKENS, "ignore_eos": True} for s in sampling)


async def test_a_planted_divergence_fails_with_its_position(planted: tuple[Planted, Endpoint]) -> None:
    server, endpoint = planted
    target = dict(PROMPTS)["shared_tests"]
    server.plant = lambda text, ids: [*ids[:5], ids[5] + 1, *ids[6:]] if text == target else ids
    res = await _run(endpoint, _reference())
    assert res["passed"] is False and res["verdict"] == "diverged"
    assert res["first_divergence"] == 5
    bad = [r for r in res["prompts"] if not r["exact"]]
    assert [r["id"] for r in bad] == ["shared_tests"] and bad[0]["diverging_repeats"] == bad[0]["repeats"]
    assert "1 of" in res["reason"] and "diverge from the baseline reference; first at token 5" in res["reason"]


async def test_without_deterministic_inference_a_divergence_is_not_judged(planted: tuple[Planted, Endpoint]) -> None:
    server, endpoint = planted
    server.plant = lambda text, ids: [*ids[:3], ids[3] + 1, *ids[4:]]
    res = await _run(endpoint, _reference(), deterministic=False)
    assert res["passed"] is False and res["verdict"] == "not_deterministic"
    assert "this server did not run deterministic inference" in res["reason"]
    assert "--enable-deterministic-inference" in res["reason"] and "first at token 3" in res["reason"]
    res = await _run(endpoint, _reference(deterministic=False))
    assert res["verdict"] == "not_deterministic" and "the reference did not run" in res["reason"]


async def test_an_output_that_stops_early_is_a_failure(planted: tuple[Planted, Endpoint]) -> None:
    server, endpoint = planted
    server.plant = lambda text, ids: ids[:9] if text == "Hi" else ids
    reference = _reference()
    reference["outputs"]["hi"] = reference["outputs"]["hi"][:9]  # even a reference that stopped there too
    res = await _run(endpoint, reference)
    assert res["passed"] is False and res["verdict"] == "short_output"
    assert "stopped before max_new_tokens=16 although ignore_eos was sent (hi)" in res["reason"]


async def test_without_a_baseline_a_speculative_config_is_not_judged(planted: tuple[Planted, Endpoint]) -> None:
    _, endpoint = planted
    res = await _run(endpoint, None, baseline=False)
    assert res["passed"] is False and res["verdict"] == "no_baseline" and res["is_reference"] is False
    assert "{algorithm: none}" in res["reason"]
    base = await _run(endpoint, None, baseline=True)
    assert base["passed"] and base["verdict"] == "reference" and base["is_reference"]
    assert set(base["output_ids"]) == {pid for pid, _ in PROMPTS}


async def test_a_reference_not_from_a_deterministic_baseline_is_refused(planted: tuple[Planted, Endpoint]) -> None:
    _, endpoint = planted
    res = await _run(endpoint, _reference(algorithm="ddtree"))
    assert res["verdict"] == "bad_reference" and "from a speculative server" in res["reason"]
    old = {k: v for k, v in _reference().items() if k not in ("algorithm", "deterministic")} | {"schema": 1}
    assert "schema 1" in (reference_problem(old) or "")
    base = await _run(endpoint, None, baseline=True, deterministic=False)
    assert base["verdict"] == "not_deterministic" and not base["is_reference"]


async def test_the_server_log_fails_the_gate_whatever_the_outputs(planted: tuple[Planted, Endpoint]) -> None:
    _, endpoint = planted
    res = await _run(endpoint, _reference())
    assert res["passed"]
    line = ("2026-05-09T10:00:00+0000 host sglang[42]: RuntimeError: DDTree KV window overrun: batch row 3 would "
            "write KV slots 100..108 of its req_to_token row but owns 104")
    found = serverlog.scan(["INFO decode batch", line], source="journal of invocation abc")
    serverlog.apply(res, found)
    assert res["passed"] is False and res["verdict"] == "server_log"
    assert "KV-window invariant failing" in res["reason"] and found["invariant"] == [line]
    clean = serverlog.scan(["INFO decode batch"], source="x")
    assert clean["scanned"] and clean["passed"] and clean["reason"] is None
    trace = serverlog.scan(["[TP0] Scheduler hit an exception: Traceback (most recent call last):"], source="x")
    assert trace["passed"] is False and "exception while serving" in trace["reason"]
    unread = serverlog.scan(["(journal unavailable: timeout)"], source="x")
    assert unread["scanned"] is False and "could not be read" in unread["reason"]


def test_the_prompts_share_prefixes_in_part() -> None:
    texts = dict(PROMPTS)
    assert len(SHARED) > 300
    sharing = [pid for pid, text in PROMPTS if text.startswith(SHARED)]
    assert len(sharing) >= 4 and texts["shared_alone"] == SHARED  # one is a strict prefix of the others
    half = [pid for pid, text in PROMPTS if text.startswith(SHARED[:HALF]) and not text.startswith(SHARED)]
    assert half == ["shared_half"]
    assert texts["capital_de"][:20] == texts["capital"][:20] and texts["capital_de"] != texts["capital"]
