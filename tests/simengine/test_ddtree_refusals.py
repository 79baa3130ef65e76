"""A DDTree engine serves what the patched server serves and refuses per request what it refuses (patch 0010).

The reference is the patch itself: ``ddtree_request_refusal`` is read out of
``patches/sglang/0.5.23/0010-*.patch`` and run on the same normalized sampling
parameters as ``repro_py.simengine.ddtree_refusals.refusal``, so the simulated
engine cannot drift from the series. Sampled requests (temperature > 0, any
top_k/top_p/min_p, logit_bias, seed) are served; only what depends on the path
generated so far is refused. Over HTTP, a refused request is a 400 in each
endpoint's error shape, the OpenAI client's default request (no temperature:
sglang's 1.0) is served, and acceptance thresholds other than 1.0 are refused at
startup.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from repro_py.exitcodes import ExitCode
from repro_py.simengine import ddtree_refusals, sampling, tokenizer
from repro_py.simengine.fixtures import write_model_dirs
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags, run_engine_cli
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


SERVED = [  # sampling in every form the spec names: no refusal
    {}, {"temperature": 0.7}, {"temperature": 1.0, "top_k": 20}, {"temperature": 1}, {"temperature": 0.5, "top_k": 40},
    {"temperature": 0.7, "top_p": 0.95, "min_p": 0.05}, {"temperature": 0.8, "logit_bias": {"5": 2.0}},
    {"temperature": 0.9, "sampling_seed": 7}, {"temperature": 0.6, "stop": ["\n\n"], "n": 1},
]
PATH_DEPENDENT = [  # refused, sampled or not: they differ per tree node
    ({"temperature": 0.7, "frequency_penalty": 0.5}, "frequency_penalty=0.5"),
    ({"presence_penalty": -0.2}, "presence_penalty=-0.2"),
    ({"temperature": 0, "repetition_penalty": 1.1}, "repetition_penalty=1.1"),
    ({"temperature": 0.7, "min_new_tokens": 4}, "min_new_tokens=4"),
    ({"temperature": 0.7, "regex": "[a-z]+"}, "grammar-constrained requests (regex;"),
    ({"temperature": 0.7, "custom_params": {"thinking_budget": 64}}, "thinking budget"),
    ({"temperature": 0.7, "watermark": {"key": "k"}}, "watermark"),
]  # fmt: skip


@pytest.mark.parametrize("fields", SERVED, ids=[json.dumps(c, sort_keys=True) for c in SERVED])
def test_sampled_requests_are_served(fields: dict[str, Any]) -> None:
    assert ddtree_refusals.refusal(_normalized(fields)) is None


@pytest.mark.parametrize(("fields", "words"), PATH_DEPENDENT, ids=[w for _, w in PATH_DEPENDENT])
def test_what_depends_on_the_path_stays_refused(fields: dict[str, Any], words: str) -> None:
    why = ddtree_refusals.refusal(_normalized(fields))
    assert why is not None and words in why and "--speculative-ddtree-budget" in why


def test_sampled_requests_are_served_and_path_dependent_ones_are_400(ddtree_engine: Engine) -> None:
    # the OpenAI client's default request: no temperature (sglang's 1.0), no top_p
    status, body = _post(ddtree_engine, "/v1/chat/completions", {"model": MODEL, "messages": MSG, "max_tokens": 8})
    assert status == 200 and body["choices"][0]["finish_reason"] in {"stop", "length"}, body
    status, body = _post(
        ddtree_engine,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 4, "temperature": 0.7, "top_p": 0.95, "top_k": 20}},
    )
    assert status == 200 and len(body["output_ids"]) == 4 and body["meta_info"]["spec_verify_ct"] >= 1
    status, body = _post(
        ddtree_engine,
        "/v1/completions",
        {"model": MODEL, "prompt": "p", "max_tokens": 8, "temperature": 0, "frequency_penalty": 1},
    )
    assert status == 400 and "frequency_penalty=1.0" in body["message"]
    status, body = _post(
        ddtree_engine,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 4, "temperature": 0.8, "regex": "a+"}},
    )
    assert status == 400 and "grammar-constrained" in body["error"]["message"]
    status, body = _post(
        ddtree_engine,
        "/v1/chat/completions",
        {
            "model": MODEL,
            "messages": MSG,
            "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        },
    )
    assert status == 400 and "response_format is served as one" in body["message"]
    # still serving greedy requests, top_k 1 counting as greedy
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


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--speculative-accept-threshold-single", "0.5"], "--speculative-accept-threshold-single 0.5 / "),
        (["--speculative-accept-threshold-acc", "0.9"], "--speculative-accept-threshold-acc 0.9: "),
    ],
)
def test_a_ddtree_server_refuses_thresholds_other_than_1_at_startup(
    tmp_path: Path, flags: list[str], shown: str
) -> None:
    dirs = write_model_dirs(tmp_path)
    base = ["--model-path", dirs["model_path"], "--speculative-draft-model-path", dirs["draft_model_path"]]
    proc = run_engine_cli([*base, *ddtree_flags(), *flags, "--port", "1"])
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert shown in proc.stderr and "allows only 1.0 for both" in proc.stderr and "not be lossless" in proc.stderr
    assert proc.stderr.count("ValueError: ") == 1
    # 1.0 stated explicitly is the default: accepted
    ok = ddtree_refusals.startup_refusal(1.0, 1.0)
    assert ok is None


def test_plain_dflash_keeps_sglangs_threshold_flags(tmp_path: Path) -> None:
    """sglang's own behaviour for DFLASH: the thresholds are accepted (and reported) as given."""
    from repro_py.simengine import launch_settings  # noqa: PLC0415 - the resolver alone, no server

    dirs = write_model_dirs(tmp_path)
    settings = launch_settings.resolve([
        "--model-path", dirs["model_path"], "--speculative-draft-model-path", dirs["draft_model_path"],
        "--speculative-algorithm", "DFLASH", "--speculative-accept-threshold-single", "0.5",
    ])  # fmt: skip
    assert settings.args["speculative_accept_threshold_single"] == 0.5
    assert settings.args["speculative_accept_threshold_acc"] == 1.0


def test_plain_dflash_serves_sampling(dflash_engine: Engine) -> None:
    status, body = _post(
        dflash_engine, "/v1/chat/completions", {"model": MODEL, "messages": MSG, "max_tokens": 8, "temperature": 0.8}
    )
    assert status == 200 and body["choices"][0]["message"]["reasoning_content"]
