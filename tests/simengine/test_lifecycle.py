"""Load (nothing listens) -> warmup (503, /v1/models 200) -> ready -> SIGTERM drain -> linger -> exit."""

from __future__ import annotations

import signal
import threading
import time

import openai

from repro_py.simengine.testing import Engine
from tests.simengine.conftest import DDTREE_B8, EngineFactory


def test_nothing_listens_while_loading_then_warmup_then_ready(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, "--sim-load-seconds", "1.0", "--sim-warmup-seconds", "1.0"])
    time.sleep(0.5)
    assert eng.proc.poll() is None and not eng.listening()
    eng.wait_listening(10)
    assert eng.get("/health")[0] == 503  # warming up
    assert eng.get("/v1/models")[0] == 200  # but /v1/models already answers, as sglang's does
    assert eng.get("/ready")[0] == 503
    eng.wait_ready(10)
    assert eng.get("/health")[0] == 200 and eng.get("/health_generate")[0] == 200
    log = eng.log()
    assert "SIMULATED SGLang engine" in log and "The server is fired up and ready to roll!" in log


def test_sigterm_drains_then_lingers_answering_models(engine_factory: EngineFactory) -> None:
    eng = engine_factory(
        [
            *DDTREE_B8,
            "--sim-load-seconds",
            "0.2",
            "--sim-warmup-seconds",
            "0.1",
            "--sim-linger-seconds",
            "1.5",
            "--sim-speed",
            "5",
        ]
    )
    eng.wait_ready(10)
    result: dict[str, object] = {}

    def long_request() -> None:
        c = openai.OpenAI(base_url=eng.url + "/v1", api_key="x", max_retries=0)
        r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "drain me"}], max_tokens=150)
        result["finish"] = r.choices[0].finish_reason
        result["tokens"] = r.usage.completion_tokens if r.usage else None

    t = threading.Thread(target=long_request)
    t.start()
    time.sleep(0.3)
    sent = time.monotonic()
    eng.signal(signal.SIGTERM)
    time.sleep(0.1)
    assert eng.get("/health")[0] == 503  # draining
    t.join(20)
    assert result == {"finish": "length", "tokens": 150}  # the in-flight request finished
    # linger: the OLD process still answers /v1/models although it is going away
    assert eng.proc.poll() is None
    assert eng.get("/v1/models")[0] == 200 and eng.get("/health")[0] == 503
    assert eng.get_json("/server_info")["sim"]["phase"] == "lingering"
    assert eng.wait_exit(10) == 0
    assert time.monotonic() - sent >= 1.5
    assert not eng.listening()
    assert "Draining requests and shutting down" in eng.log()


def test_sigterm_during_load_exits_without_listening(engine_factory: EngineFactory) -> None:
    eng: Engine = engine_factory([*DDTREE_B8, "--sim-load-seconds", "30"])
    deadline = time.monotonic() + 15
    while "Load weight begin" not in eng.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not eng.listening()
    eng.signal(signal.SIGTERM)
    assert eng.wait_exit(5) == 0


def test_skip_server_warmup_omits_accept_length_until_a_decode(engine_factory: EngineFactory) -> None:
    eng = engine_factory(
        [
            *DDTREE_B8,
            "--sim-load-seconds",
            "0.1",
            "--sim-warmup-seconds",
            "0",
            "--skip-server-warmup",
            "--sim-speed",
            "50",
        ]
    )
    eng.wait_ready(10)
    assert "avg_spec_accept_length" not in eng.get_json("/server_info")["internal_states"][0]
    c = openai.OpenAI(base_url=eng.url + "/v1", api_key="x", max_retries=0)
    c.completions.create(model="m", prompt="p", max_tokens=50)
    assert eng.get_json("/server_info")["internal_states"][0]["avg_spec_accept_length"] > 1.5


def test_health_can_take_as_long_as_sglangs(engine_factory: EngineFactory) -> None:
    eng = engine_factory(
        [*DDTREE_B8, "--sim-load-seconds", "0.1", "--sim-warmup-seconds", "0", "--sim-health-seconds", "0.5"]
    )
    eng.wait_ready(10)
    start = time.monotonic()
    assert eng.get("/health")[0] == 200
    assert time.monotonic() - start >= 0.5
    start = time.monotonic()
    assert eng.get("/ready")[0] == 200 and time.monotonic() - start < 0.5
