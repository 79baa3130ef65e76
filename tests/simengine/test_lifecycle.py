"""Load (nothing listens) -> warmup (503, /v1/models 200) -> ready -> SIGTERM drain -> linger -> exit."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import openai
import pytest

from repro_py.simengine.process import Engine, EngineError, start_engine
from tests.simengine.conftest import DDTREE_B8, EngineFactory


def _wait_log(eng: Engine, text: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in eng.log():
        assert eng.proc.poll() is None, f"engine exited before logging {text!r}:\n{eng.log()}"
        assert time.monotonic() < deadline, f"no {text!r} in the log within {timeout} s:\n{eng.log()}"
        time.sleep(0.05)


def test_nothing_listens_while_loading_then_warmup_then_ready(engine_factory: EngineFactory) -> None:
    # warmup 2 s: the 503 checks after it starts listening have that long, even on a loaded machine
    eng = engine_factory([*DDTREE_B8, "--sim-load-seconds", "1.0", "--sim-warmup-seconds", "2.0"])
    _wait_log(eng, "Load weight begin")  # the load phase has begun (not merely a slow process start)
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
            "2.0",
            "--sim-speed",
            "1",
        ]
    )
    eng.wait_ready(10)
    result: dict[str, object] = {}

    def long_request() -> None:
        c = openai.OpenAI(base_url=eng.url + "/v1", api_key="x", max_retries=0)
        r = c.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "drain me"}], max_tokens=200, temperature=0
        )
        result["finish"] = r.choices[0].finish_reason
        result["tokens"] = r.usage.completion_tokens if r.usage else None

    t = threading.Thread(target=long_request)
    t.start()
    deadline = time.monotonic() + 15  # wait until the engine has taken the request (no fixed sleep)
    while eng.get_json("/server_info")["sim"]["generation_requests"] < 1:
        assert time.monotonic() < deadline, "the request never reached the engine"
        time.sleep(0.02)
    assert t.is_alive()  # still in flight when SIGTERM arrives: what is drained below
    sent = time.monotonic()
    eng.signal(signal.SIGTERM)
    _wait_log(eng, "Draining requests and shutting down")
    assert eng.get("/health")[0] == 503  # draining
    t.join(30)
    assert not t.is_alive()
    assert result == {"finish": "length", "tokens": 200}  # the in-flight request finished
    # linger: the OLD process still answers /v1/models although it is going away (the client may
    # have its last bytes a moment before the engine notices the drain is over: wait for the log)
    _wait_log(eng, "SIMULATED linger: still answering /v1/models")
    assert eng.proc.poll() is None
    assert eng.get("/v1/models")[0] == 200 and eng.get("/health")[0] == 503
    assert eng.get_json("/server_info")["sim"]["phase"] == "lingering"
    assert eng.wait_exit(10) == 0
    assert time.monotonic() - sent >= 2.0
    assert not eng.listening()


def test_sigterm_during_load_exits_without_listening(engine_factory: EngineFactory) -> None:
    eng: Engine = engine_factory([*DDTREE_B8, "--sim-load-seconds", "30"])
    _wait_log(eng, "Load weight begin")
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
    c.completions.create(model="m", prompt="p", max_tokens=50, temperature=0)
    assert eng.get_json("/server_info")["internal_states"][0]["avg_spec_accept_length"] > 1.5


def test_health_can_take_as_long_as_sglangs(engine_factory: EngineFactory) -> None:
    eng = engine_factory(
        [*DDTREE_B8, "--sim-load-seconds", "0.1", "--sim-warmup-seconds", "0", "--sim-health-seconds", "0.5"]
    )
    eng.wait_ready(10)
    start = time.monotonic()
    assert eng.get("/health")[0] == 200
    assert time.monotonic() - start >= 0.5
    ready_s = []
    for _ in range(3):  # the best of three: one slow answer on a loaded machine is not the engine's delay
        start = time.monotonic()
        assert eng.get("/ready")[0] == 200
        ready_s.append(time.monotonic() - start)
    assert min(ready_s) < 0.5, ready_s


def test_an_engine_that_exits_or_never_listens_is_an_engine_error_naming_the_wait(tmp_path: Path) -> None:
    # an argument the engine refuses: it exits before listening, and the error says so with its log
    eng = start_engine(["--speculative-algorithm", "NOT-AN-ALGORITHM"], model_root=tmp_path)
    try:
        with pytest.raises(EngineError, match=r"engine exited with [1-9]\d* before it could become ready") as info:
            eng.wait_ready(timeout=60)
        assert "NOT-AN-ALGORITHM" in str(info.value)
    finally:
        eng.stop()
    # still loading after the wait's timeout: the error names the wait and the time
    slow = start_engine(["--sim-load-seconds", "30"], model_root=tmp_path)
    try:
        with pytest.raises(EngineError, match=r"engine did not listen within 0.5 s"):
            slow.wait_listening(timeout=0.5)
    finally:
        slow.stop()
