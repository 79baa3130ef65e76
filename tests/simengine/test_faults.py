"""Each fault, selectable per configuration, and visible in server info and the startup log."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from repro_py.bench.counters import collapse, parse_prometheus
from repro_py.simengine.faults import FaultError, parse_faults
from repro_py.simengine.process import Engine
from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory

PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse."}]


def tree(budget: int, topk: int, block: int = 8, window: str | None = "2048") -> list[str]:
    args = [
        "--speculative-algorithm",
        "DDTREE",
        "--speculative-dflash-block-size",
        str(block),
        "--speculative-ddtree-budget",
        str(budget),
        "--speculative-ddtree-topk-cap",
        str(topk),
    ]
    return [*args, "--speculative-draft-window-size", window] if window else args


def greedy_text(eng: Engine, max_tokens: int = 120) -> str:
    c = openai.OpenAI(base_url=eng.url + "/v1", api_key="x", max_retries=0)
    r = c.chat.completions.create(model="m", messages=PROMPT, max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content or ""


def post_raw(eng: Engine, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        eng.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_crash_on_load_exits_nonzero_explaining_itself(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, "--sim-load-seconds", "0.2", "--sim-fault", "crash-on-load"])
    assert eng.wait_exit(10) == 1
    assert not eng.listening()
    log = eng.log()
    assert "faults=crash-on-load" in log and "Traceback" in log and "SIMULATED fault crash-on-load" in log


def test_never_ready_listens_but_health_stays_503(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-fault", "never-ready"])
    eng.wait_listening(10)
    # a healthy engine with this warmup (0.1 s) is ready well within this second; this one never is
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert eng.get("/health")[0] == 503
        time.sleep(0.1)
    assert eng.get("/v1/models")[0] == 200
    info = eng.get_json("/server_info")
    assert info["sim"]["faults"] == ["never-ready"] and "never-ready" in info["sim"]["faults_active"]
    assert info["sim"]["phase"] == "warmup"
    assert "SIMULATED fault never-ready: warmup will never finish" in eng.log()
    assert eng.stop() == 0


def test_crash_after_n_requests(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--sim-fault", "crash-after:2"])
    eng.wait_ready(10)
    assert eng.get_json("/server_info")["sim"]["faults"] == ["crash-after:2"]
    greedy_text(eng, 10)
    greedy_text(eng, 10)
    with pytest.raises(openai.APIConnectionError):
        greedy_text(eng, 10)
    assert eng.wait_exit(5) == 1
    assert "SIMULATED fault crash-after:2" in eng.log()


def test_refused_requests_do_not_count_toward_crash_after(engine_factory: EngineFactory) -> None:
    """Only a request sglang admits counts: every layer's 400 (the request model, the serving layer, the
    sampling parameters, the context length, the DDTree refusal, the /generate contract) leaves the count."""
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--sim-fault", "crash-after:1"])
    eng.wait_ready(10)
    msgs = [{"role": "user", "content": "Describe a tree."}]
    refused = [
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": -1}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": -1}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 300000, "temperature": 0}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "presence_penalty": 0.5}),  # DDTree refuses
        ("/v1/chat/completions", {"messages": [], "max_tokens": 8}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": "many"}),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": -1, "temperature": 0}}),
        ("/generate", {"text": "x", "sampling_params": {"temperature": "hot"}}),
    ]
    for path, body in refused:
        status, raw = post_raw(eng, path, body)
        assert status == 400, (path, body, raw[:300])
    assert eng.get_json("/server_info")["sim"]["generation_requests"] == 0
    greedy_text(eng, 10)  # the first admitted request is served
    with pytest.raises(openai.APIConnectionError):
        greedy_text(eng, 10)  # the second finds the scheduler dead
    assert eng.wait_exit(5) == 1


def test_oom_above_budget_refuses_to_start_only_above_threshold(engine_factory: EngineFactory) -> None:
    big = engine_factory([*tree(48, 8), "--sim-load-seconds", "0.2", "--sim-fault", "oom-above-budget:32"])
    small = engine_factory([*tree(16, 4), *FAST, "--sim-fault", "oom-above-budget:32"])
    assert big.wait_exit(10) == 1
    assert "CUDA out of memory" in big.log() and "oom-above-budget:32" in big.log()
    small.wait_ready(10)
    assert small.get_json("/server_info")["sim"]["faults"] == ["oom-above-budget:32"]


def test_greedy_text_identical_across_lossless_configs_and_garbled_under_mask_offset(
    engine_factory: EngineFactory,
) -> None:
    common = [*FAST, "--sim-speed", "50", "--reasoning-parser", "kimi_k2"]
    configs = {
        "baseline": [],
        "dflash": ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8"],
        "b8t4": tree(8, 4),
        "b32t8-wnone": tree(32, 8, window=None),
        "bs16-b16t4": tree(16, 4, block=16),
        "mask-offset-b7": [*tree(7, 4), "--sim-fault", "mask-offset"],  # budget+1 == block: the bug hides
        "mask-offset-b16": [*tree(16, 4), "--sim-fault", "mask-offset"],
    }
    engines = {name: engine_factory([*args, *common]) for name, args in configs.items()}
    texts = {}
    for name, eng in engines.items():
        eng.wait_ready(20)
        texts[name] = eng.get_json("/server_info"), greedy_text(eng, 120)
    clean = texts["baseline"][1]
    c = openai.OpenAI(base_url=engines["baseline"].url + "/v1", api_key="x", max_retries=0)
    reasoning_clean = (
        c.chat.completions.create(model="m", messages=PROMPT, max_tokens=120, temperature=0).choices[0].message
    )
    for name in ("dflash", "b8t4", "b32t8-wnone", "bs16-b16t4", "mask-offset-b7"):
        assert texts[name][1] == clean, name
    baseline_info = texts["baseline"][0]
    assert baseline_info["speculative_algorithm"] is None
    assert "avg_spec_accept_length" not in baseline_info["internal_states"][0]  # no speculative decoding
    assert texts["dflash"][0]["speculative_ddtree_budget"] is None  # plain DFLASH is the chain
    info, _ = texts["mask-offset-b16"]
    assert info["sim"]["faults"] == ["mask-offset"] and "mask-offset" in info["sim"]["faults_active"]
    assert "mask-offset" not in texts["mask-offset-b7"][0]["sim"]["faults_active"]
    c16 = openai.OpenAI(base_url=engines["mask-offset-b16"].url + "/v1", api_key="x", max_retries=0)
    garbled = c16.chat.completions.create(model="m", messages=PROMPT, max_tokens=120, temperature=0).choices[0].message
    clean_reasoning = reasoning_clean.reasoning_content  # type: ignore[attr-defined]
    garbled_reasoning = garbled.reasoning_content  # type: ignore[attr-defined]
    assert garbled_reasoning != clean_reasoning
    common_prefix = next(
        (i for i, (a, b) in enumerate(zip(garbled_reasoning, clean_reasoning, strict=False)) if a != b), 0
    )
    assert common_prefix > 10  # garbled from some position on, not from the start
    # the drafts rarely match a garbled verify: acceptance collapses (b16 t4 ~50 tok/s before the fix)
    accept = engines["mask-offset-b16"].get_json("/server_info")["internal_states"][0]["avg_spec_accept_length"]
    assert accept < 2.2


def _stream(eng: Engine, max_tokens: int = 40, timeout: float = 30) -> tuple[list[Any], str | None]:
    """(SSE events, error) of one streamed chat completion read with a plain HTTP client."""
    req = urllib.request.Request(
        eng.url + "/v1/chat/completions",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps(
            {
                "messages": PROMPT,
                "max_tokens": max_tokens,
                "stream": True,
                "temperature": 0,
                "stream_options": {"include_usage": True},
            }
        ).encode(),
    )
    events: list[Any] = []
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    data = line[6:]
                    events.append(data if data == "[DONE]" else json.loads(data))
    except (TimeoutError, OSError) as exc:
        return events, f"{type(exc).__name__}: {exc}"
    return events, None


def _text_tokens(events: list[Any]) -> int:
    return sum(
        1
        for e in events
        if isinstance(e, dict)
        and e.get("choices")
        and (e["choices"][0]["delta"].get("content") or e["choices"][0]["delta"].get("reasoning_content"))
    )


def test_stream_error_after_n_sends_sglangs_error_event_mid_stream(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--sim-fault", "stream-error-after:1"])
    eng.wait_ready(10)
    ok, _ = _stream(eng)
    assert ok[-2]["usage"]["completion_tokens"] == 40 and ok[-1] == "[DONE]"
    bad, err = _stream(eng)
    assert err is None and bad[-1] == "[DONE]"  # sglang: the error event, then usage and [DONE]
    errors = [e["error"] for e in bad if isinstance(e, dict) and "error" in e]
    assert len(errors) == 1 and errors[0]["code"] == 500 and "SIMULATED fault" in errors[0]["message"]
    assert list(errors[0]) == ["object", "message", "type", "param", "code"]
    assert _text_tokens(bad) > 0 and bad[-2]["usage"]["completion_tokens"] == 20  # failed halfway
    assert "stream-error-after:1" in eng.get_json("/server_info")["sim"]["faults_active"]


def test_abort_after_n_ends_requests_with_finish_reason_abort(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--enable-metrics", "--sim-fault", "abort-after:1"])
    eng.wait_ready(10)
    _stream(eng)
    events, err = _stream(eng)
    assert err is None and events[-1] == "[DONE]"
    finishes = [e["choices"][0]["finish_reason"] for e in events if isinstance(e, dict) and e.get("choices")]
    assert finishes[-1] == "abort" and events[-2]["usage"]["completion_tokens"] == 20
    metrics = parse_prometheus(eng.get("/metrics")[1].decode())
    assert collapse(metrics, "sglang:num_aborted_requests_total") == 1


def test_stall_after_n_stops_sending_until_the_client_gives_up(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--sim-fault", "stall-after:1"])
    eng.wait_ready(10)
    _stream(eng)
    t0 = time.monotonic()
    events, err = _stream(eng, timeout=1.5)
    assert err is not None and "timed out" in err.lower() and time.monotonic() - t0 < 5
    assert _text_tokens(events) > 0 and "[DONE]" not in events
    # the engine dropped the abandoned request: nothing runs, the cache can be flushed
    deadline = time.monotonic() + 5
    while eng.get("/flush_cache")[0] != 200:
        assert time.monotonic() < deadline, "the stalled request still holds the scheduler"
        time.sleep(0.1)


def test_unknown_fault_lists_every_fault() -> None:
    with pytest.raises(FaultError) as err:
        parse_faults(["explode"])
    for name in ("crash-after:N", "stream-error-after:N", "abort-after:N", "stall-after:N"):
        assert name in str(err.value)
    with pytest.raises(FaultError, match="stall-after needs a non-negative integer"):
        parse_faults(["stall-after"])
