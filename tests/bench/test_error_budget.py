"""A dead engine is never measured: the error budget counts only errors from a server that stayed up.

The field's case: engine SIGKILLed mid-repeat with ``--error-budget 1000``, 88 of 96 requests failed,
``/metrics`` unreachable, yet repeat ``ok``, cell ``ok``, exit 0 and a tok/s figure from 8 requests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from repro_py.bench.client import RequestResult
from repro_py.bench.counters import CounterSnapshot
from repro_py.bench.liveness import repeat_trouble, server_identity
from repro_py.endpoint import Endpoint
from repro_py.exitcodes import ExitCode
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags
from tests.bench.conftest import bench_and_kill

Factory = Callable[[list[str]], Engine]


def test_kill_9_mid_repeat_fails_it_whatever_the_error_budget(engine_factory: Factory, tmp_path: Path) -> None:
    """One cell, one repeat of 96 requests 8 at a time, budget 1000: the engine dies once 8 have finished."""
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", "4"])
    eng.wait_ready(30)
    out = tmp_path / "bench.json"
    bench = bench_and_kill(eng, ["--contexts", "60", "--concurrency", "8", "--repeats", "1", "--requests-per-cell",
                                 "96", "--max-tokens", "64", "--ignore-eos", "--error-budget", "1000", "--out",
                                 str(out), "--quiet"], served=2 + 8 + 8)  # probe, warm-up, 8 in flight, 8 done
    assert bench.returncode == ExitCode.FAILURE, bench.stdout + bench.stderr
    assert "the server stopped answering" in bench.stderr
    cell = json.loads(out.read_text())["cells"][0]
    rep = cell["repeats"][0]
    assert rep["ok"] >= 8 and rep["errors"] >= 1  # some finished before the kill: a figure could have been made
    assert rep["status"] == "failed" and "the server stopped answering" in rep["reason"], rep["reason"]
    assert cell["status"] == "failed" and cell["server_lost"] is True and cell["median"] is None
    assert rep["budget_used"] is None and rep["error_budget"] == 1000
    assert "none counted against the error budget" in rep["reason"]


@pytest.fixture
async def restarting() -> AsyncIterator[tuple[Endpoint, dict[str, int]]]:
    """A server whose /server_info pid is what the test says (a restart is a new pid)."""
    state = {"pid": 100}

    async def info(request: web.Request) -> web.Response:
        return web.json_response({"sim": {"pid": state["pid"]}, "startup_time": {"load_weight": 1.0}})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/server_info", info)
    app.router.add_get("/v1/models", models)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield Endpoint(str(server.make_url("")).rstrip("/")), state
    await server.close()


async def test_a_restart_or_a_cut_connection_fails_the_repeat(restarting: tuple[Endpoint, dict[str, int]]) -> None:
    endpoint, state = restarting
    ok = CounterSnapshot({}, None)
    answered = RequestResult(ok=False, error="HTTP 503: busy", status=503)
    async with aiohttp.ClientSession() as session:
        identity = await server_identity(session, endpoint)
        assert identity is not None
        assert await repeat_trouble(session, endpoint, [answered], ok, ok, identity=identity) is None  # budget's
        state["pid"] = 101
        trouble = await repeat_trouble(session, endpoint, [answered], ok, ok, identity=identity)
        assert trouble is not None and trouble.gone and "restarted during the repeat" in trouble.reason
        state["pid"] = 100
        cut = RequestResult(ok=False, error="ServerDisconnectedError: Server disconnected", lost=True)
        trouble = await repeat_trouble(session, endpoint, [cut], ok, ok, identity=identity)
        assert trouble is not None and not trouble.gone and "lost their connection" in trouble.reason
        dead = Endpoint("http://127.0.0.1:9")
        trouble = await repeat_trouble(session, dead, [answered], ok, ok, identity=identity)
        assert trouble is not None and trouble.gone and "stopped answering" in trouble.reason
