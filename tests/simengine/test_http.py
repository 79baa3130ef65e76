"""HTTP API through the official openai client and plain HTTP, against a real engine process."""

from __future__ import annotations

import json
import re
import urllib.request
from typing import Any

import openai
import pytest

from repro_py.bench.counters import collapse, parse_prometheus
from repro_py.simengine import textgen
from repro_py.simengine.process import Engine

KEY = "sk-test"
MODEL = "kimi-k2.6-sim"


def client(eng: Engine, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=eng.url + "/v1", api_key=key, max_retries=0, timeout=30)


def post(eng: Engine, path: str, body: dict[str, Any], key: str | None = KEY) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(
        eng.url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def test_chat_non_stream_usage_reasoning_and_length(ddtree_engine: Engine) -> None:
    r = client(ddtree_engine).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Describe a tree."}], max_tokens=64, temperature=0
    )
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage is not None and r.usage.completion_tokens == 64
    assert r.usage.total_tokens == r.usage.prompt_tokens + 64
    assert choice.message.content == ""  # cut while thinking
    assert len(choice.message.reasoning_content) > 0  # type: ignore[attr-defined]
    assert r.model == MODEL


def test_chat_stream_matches_non_stream(ddtree_engine: Engine) -> None:
    c = client(ddtree_engine)
    msgs: Any = [{"role": "user", "content": textgen.load_problems()[1].prompt}]
    full = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=1024, temperature=0)
    stream = c.chat.completions.create(
        model=MODEL, messages=msgs, max_tokens=1024, stream=True, stream_options={"include_usage": True}, temperature=0
    )
    reasoning, content, finish, usage, n = "", "", None, None, 0
    for chunk in stream:
        n += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            reasoning += getattr(ch.delta, "reasoning_content", None) or ""
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert finish == "stop" == full.choices[0].finish_reason
    assert content == full.choices[0].message.content
    assert reasoning == full.choices[0].message.reasoning_content  # type: ignore[attr-defined]
    assert usage is not None and full.usage is not None and usage.completion_tokens == full.usage.completion_tokens
    assert n > 20  # one chunk per speculative step, not one blob
    blocks = re.findall(r"```python\n(.*?)```", content, re.S)
    assert blocks[-1].strip() == textgen.load_problems()[1].reference.strip()


def test_completions_stream_and_non_stream(ddtree_engine: Engine) -> None:
    c = client(ddtree_engine)
    r = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=40, temperature=0)
    assert r.choices[0].finish_reason == "length" and r.usage is not None and r.usage.completion_tokens == 40
    text = "".join(
        ch.choices[0].text
        for ch in c.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=40, stream=True, temperature=0
        )
        if ch.choices
    )
    assert text == r.choices[0].text
    assert text.startswith("<think>")  # raw output: completions do not split reasoning


def test_generate_meta_info_and_spec_stats(ddtree_engine: Engine) -> None:
    status, body, headers = post(
        ddtree_engine, "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 100, "temperature": 0}}
    )
    assert status == 200 and headers["X-SGLang-Simulated"] == "true"
    out = json.loads(body)
    meta = out["meta_info"]
    assert meta["completion_tokens"] == 100 == len(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 100}
    assert 2.0 < meta["spec_accept_length"] <= 8.0 and meta["spec_verify_ct"] > 0
    assert meta["sim_speed"] == 50


def test_server_info_echoes_settings_and_acceptance(ddtree_engine: Engine) -> None:
    info = ddtree_engine.get_json("/server_info")
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_ddtree_budget"] == 8 and info["speculative_ddtree_topk_cap"] == 4
    assert info["speculative_dflash_block_size"] == 8 == info["speculative_num_draft_tokens"]
    assert info["speculative_draft_window_size"] == 2048
    assert info["served_model_name"] == MODEL and info["version"] == "0.5.23"
    assert info["simulated"] is True and info["sim"]["speed"] == 50 and info["sim"]["pid"] == ddtree_engine.pid
    assert info["sim"]["faults"] == []
    assert isinstance(info["max_total_num_tokens"], int)
    assert 3.5 < info["internal_states"][0]["avg_spec_accept_length"] < 6.0


def test_metrics_counters_move_with_requests(ddtree_engine: Engine) -> None:
    def scrape() -> dict[str, float]:
        status, body, _ = ddtree_engine.get("/metrics")  # exempt from the API key, as in sglang
        assert status == 200
        samples = parse_prometheus(body.decode())  # the benchmark's own parser: raises on a malformed line
        totals = {name: collapse(samples, name) for name in {s.name for s in samples}}
        return {name: value for name, value in totals.items() if value is not None}

    before = scrape()
    client(ddtree_engine).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "m"}], max_tokens=200, temperature=0
    )
    after = scrape()
    gen = after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"]
    verify = after["sglang:spec_verify_calls_total"] - before["sglang:spec_verify_calls_total"]
    assert gen == 200 and after["sglang:num_requests_total"] - before["sglang:num_requests_total"] == 1
    assert 3.0 < gen / verify < 7.0
    assert after["sglang:prompt_tokens_total"] > before["sglang:prompt_tokens_total"]
    for name in ("sglang:spec_accept_length", "sglang:gen_throughput", "sglang:sim_speed"):
        assert name in after


def test_api_key_401_and_exemptions(ddtree_engine: Engine) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(ddtree_engine, key="wrong").models.list()
    status, body, headers = post(ddtree_engine, "/generate", {"text": "x"}, key=None)
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}
    assert headers["X-SGLang-Simulated"] == "true"
    plain = Engine(proc=ddtree_engine.proc, port=ddtree_engine.port, log_path=ddtree_engine.log_path)
    assert plain.get("/v1/models")[0] == 401 and plain.get("/server_info")[0] == 401
    assert plain.get("/health")[0] == 200 and plain.get("/metrics")[0] == 200


def test_models_tokenize_flush_and_not_found(ddtree_engine: Engine) -> None:
    models = client(ddtree_engine).models.list()
    card = models.data[0]
    assert card.id == MODEL and "SIMULATED" in card.owned_by
    status, body, _ = post(ddtree_engine, "/tokenize", {"prompt": "Hello, world"})
    tok = json.loads(body)
    assert status == 200 and tok["count"] == len(tok["tokens"]) == 3 and tok["max_model_len"] > 0
    status, body, _ = post(ddtree_engine, "/flush_cache", {})
    assert status == 200 and body.startswith(b"Cache flushed.")
    status, body, _ = ddtree_engine.get("/nope")
    assert status == 404 and json.loads(body) == {"detail": "Not Found"}
    status, _, _ = post(
        ddtree_engine,
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 10_000_000},
    )
    assert status == 400


def test_the_openai_clients_default_request_is_served_by_a_ddtree_server(ddtree_engine: Engine) -> None:
    """What the OpenAI client sends when a caller passes only a model and messages: no temperature (sglang's 1.0),
    no max_tokens. A DDTree server answers it with 200 and a sampled generation, and a seed reproduces one."""
    c = client(ddtree_engine)
    msgs = [{"role": "user", "content": "Describe a tree."}]
    raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=msgs)
    assert raw.http_response.status_code == 200
    r = raw.parse()
    assert r.choices[0].finish_reason == "stop" and r.usage is not None and r.usage.completion_tokens > 100
    assert r.choices[0].message.content and getattr(r.choices[0].message, "reasoning_content", None)
    x, y = (c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=40) for _ in range(2))
    assert x.choices[0].message.model_dump() != y.choices[0].message.model_dump()  # sampled: two draws differ
    a = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0.8, seed=7)
    b = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0.8, seed=7)
    assert a.choices[0].message.model_dump() == b.choices[0].message.model_dump()


def test_sampling_seed_is_reproducible_over_http(dflash_engine: Engine) -> None:
    c = client(dflash_engine)
    msgs: Any = [{"role": "user", "content": "sample"}]
    a = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0.8, seed=7)
    b = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0.8, seed=7)
    g = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=30, temperature=0)
    assert a.choices[0].message.reasoning_content == b.choices[0].message.reasoning_content  # type: ignore[attr-defined]
    assert a.choices[0].message.reasoning_content != g.choices[0].message.reasoning_content  # type: ignore[attr-defined]


def test_plain_http_sse_framing_and_header(ddtree_engine: Engine) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "sse"}],
        "max_tokens": 30,
        "stream": True,
        "temperature": 0,
    }
    status, raw, headers = post(ddtree_engine, "/v1/chat/completions", body)
    assert status == 200 and headers["X-SGLang-Simulated"] == "true"
    assert headers["Content-Type"].startswith("text/event-stream")
    events = [e for e in raw.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"reasoning_content": None, "role": "assistant", "content": ""}
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["delta"] == {
        "reasoning_content": None
    }
