"""A DDTree engine refuses per request what the patched server refuses (patch 0010), with its messages.

The reference is the patch itself: ``ddtree_request_refusal`` is read out of
``patches/sglang/0.5.23/0010-*.patch`` and run on the same normalized sampling
parameters as ``repro_py.simengine.ddtree_refusals.refusal``, so the simulated
engine cannot drift from the series. Over HTTP, a refused request is a 400 in
each endpoint's error shape and the engine keeps serving greedy requests.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from repro_py.simengine import ddtree_refusals, sampling, tokenizer
from repro_py.simengine.testing import Engine
from tests.simengine.test_http import KEY, MODEL

REPO = Path(__file__).resolve().parents[2]
MSG = [{"role": "user", "content": "Describe a tree."}]


def _patched_refusal() -> Any:
    """``ddtree_request_refusal`` and its constant, as patch 0010 adds them to sglang."""
    patch = next((REPO / "patches/sglang/0.5.23").glob("0010-*.patch")).read_text(encoding="utf-8")
    lines = patch.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("+DDTREE_SERVE_WITHOUT = ("))
    end = next(i for i, line in enumerate(lines) if line.startswith("+def ddtree_target_refusal("))
    source = "\n".join(line[1:] for line in lines[start:end] if line.startswith("+"))
    namespace: dict[str, Any] = {"Optional": Optional}
    exec(compile(source, "patch-0010", "exec"), namespace)
    return namespace["ddtree_request_refusal"]


def _normalized(fields: dict[str, Any]) -> sampling.SamplingParams:
    """The engine's SamplingParams after construction, normalize and verify (checked against sglang's own
    class, end to end, by test_request_parity.py)."""
    sp = sampling.SamplingParams.build({k: v for k, v in fields.items() if k != "custom_logit_processor"})
    sp.normalize()
    sp.verify(tokenizer.VOCAB_SIZE)
    return sp


CASES: list[dict[str, Any]] = [
    {},
    {"temperature": 0},
    {"temperature": 0.7},
    {"temperature": 0.7, "top_k": 1},
    {"temperature": 1.0, "top_k": 20},
    {"temperature": 0, "frequency_penalty": 0.5},
    {"temperature": 0, "presence_penalty": -0.2, "repetition_penalty": 1.1},
    {"temperature": 0, "min_new_tokens": 4},
    {"temperature": 0, "regex": "[a-z]+"},
    {"temperature": 0, "ebnf": "root ::= x"},
    {"temperature": 0, "json_schema": "{}"},
    {"temperature": 0, "custom_params": {"thinking_budget": 64}},
    {"temperature": 0, "custom_logit_processor": "serialized"},
    {"temperature": 1},  # as /generate sends it: printed as sent (1, not 1.0)
    {"temperature": 0, "frequency_penalty": 1},
    {"temperature": 0, "watermark": {"key": "k"}},
    {"temperature": 0.5, "top_k": 40},
    {"temperature": 1e-7},  # below sglang's epsilon: greedy
]


@pytest.mark.parametrize("fields", CASES, ids=[json.dumps(c, sort_keys=True) for c in CASES])
def test_the_engine_refuses_exactly_what_the_patch_refuses(fields: dict[str, Any]) -> None:
    sp = _normalized(fields)
    processor = fields.get("custom_logit_processor")
    expected = _patched_refusal()(sp, custom_logit_processor=processor)
    assert ddtree_refusals.refusal(sp, custom_logit_processor=processor) == expected


def _post(eng: Engine, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        eng.url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_sampling_and_penalties_are_400_and_greedy_is_served(ddtree_engine: Engine) -> None:
    status, body = _post(ddtree_engine, "/v1/chat/completions", {"model": MODEL, "messages": MSG, "max_tokens": 8})
    assert status == 400 and body["object"] == "error" and body["type"] == "BadRequestError"
    assert "serves greedy decoding only" in body["message"] and "temperature=1.0" in body["message"]
    status, body = _post(
        ddtree_engine,
        "/v1/completions",
        {"model": MODEL, "prompt": "p", "max_tokens": 8, "temperature": 0, "frequency_penalty": 1},
    )
    assert status == 400 and "frequency_penalty=1.0" in body["message"]
    status, body = _post(
        ddtree_engine,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 4, "temperature": 0, "regex": "a+"}},
    )
    assert status == 400 and "grammar-constrained" in body["error"]["message"]
    status, body = _post(
        ddtree_engine,
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": MSG,
            "max_tokens": 8,
            "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        },
    )
    assert status == 400 and "response_format is served as one" in body["message"]
    # still serving: greedy requests go through, and top_k 1 counts as greedy
    status, body = _post(
        ddtree_engine, "/v1/chat/completions", {"model": MODEL, "messages": MSG, "max_tokens": 8, "temperature": 0}
    )
    assert status == 200 and body["choices"][0]["finish_reason"] in {"stop", "length"}
    status, _ = _post(
        ddtree_engine,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 4, "temperature": 0.9, "top_k": 1}},
    )
    assert status == 200


def test_plain_dflash_serves_sampling(dflash_engine: Engine) -> None:
    status, body = _post(
        dflash_engine, "/v1/chat/completions", {"model": MODEL, "messages": MSG, "max_tokens": 8, "temperature": 0.8}
    )
    assert status == 200 and body["choices"][0]["message"]["reasoning_content"]
