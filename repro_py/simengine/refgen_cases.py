"""Request bodies put to sglang 0.5.23's own request path (``sglang_oracle``) and to the simulated engine.

Each case is a body for one route (``/v1/chat/completions``, ``/v1/completions``,
``/generate``) on a plain DFLASH server (``mode: dflash``) or a DDTree one
(``mode: ddtree``, patch 0010's refusals on top). Valid ones and invalid ones
at every layer of sglang's path: the pydantic request models (wrong types,
lax-mode coercions pydantic accepts, missing fields, nulls, unions), the
serving layer's ``_validate_request``, the ``/generate`` API contract, the
tokenizer manager's context-length checks, ``SamplingParams`` normalize and
verify, and the DDTree refusal after them. ``refgen`` records sglang's verdict
(status and error body) on each into ``sglang_reference.json``; the simulated
engine must give the same answer to each (``tests/simengine/test_request_parity.py``).

A body sglang admits carries a small ``max_tokens`` so that the simulated
engine, which then generates, answers quickly.
"""

from __future__ import annotations

from typing import Any

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
GENERATE = "/generate"
_MSG = [{"role": "user", "content": "hi"}]
_M4: dict[str, Any] = {"messages": _MSG, "max_tokens": 4}
_P4: dict[str, Any] = {"prompt": "hi", "max_tokens": 4}
_G4: dict[str, Any] = {"max_new_tokens": 4}
_STOPS_33 = [f"s{i}" for i in range(33)]


def _case(path: str, body: dict[str, Any], mode: str = "dflash") -> dict[str, Any]:
    return {"path": path, "body": body, "mode": mode}


_CHAT_TYPES: tuple[dict[str, Any], ...] = (
    {**_M4, "temperature": "abc"},
    {**_M4, "temperature": "0.5"},
    {**_M4, "temperature": [1]},
    {**_M4, "temperature": None},
    {**_M4, "top_p": "high"},
    {"messages": _MSG, "max_tokens": "12"},
    {"messages": _MSG, "max_tokens": "many"},
    {"messages": _MSG, "max_tokens": 1.5},
    {"messages": _MSG, "max_tokens": 2.0},
    {"messages": _MSG, "max_tokens": [2]},
    {**_M4, "stream": "yes"},
    {**_M4, "stream": "maybe"},
    {**_M4, "stream": 2},
    {**_M4, "seed": "s"},
    {**_M4, "n": "two"},
    {**_M4, "stream_options": "x"},
    {**_M4, "stream_options": {"include_usage": "maybe"}},
    {**_M4, "stream": True, "stream_options": {"continuous_usage_stats": True}},
    {**_M4, "ignore_eos": "perhaps"},
    {"messages": "hi"},
    {"model": "m"},
    {**_M4, "temperature": "abc", "max_tokens": "x"},
    {**_M4, "temperature": True},
    {"messages": _MSG, "max_tokens": "1.0"},
    {**_M4, "max_completion_tokens": "x"},
    {**_M4, "stream": "TRUE"},
    {**_M4, "stream": 1.0},
    {**_M4, "stream": []},
    {**_M4, "frequency_penalty": "x"},
    {**_M4, "presence_penalty": {}},
    {**_M4, "top_k": "x"},
    {**_M4, "min_p": "x"},
    {**_M4, "min_tokens": 0.5},
    {**_M4, "repetition_penalty": "x"},
    {**_M4, "separate_reasoning": "x"},
    {**_M4, "chat_template_kwargs": "x"},
    {**_M4, "model": 5},
    {**_M4, "stream": None},
    {**_M4, "n": None},
    {**_M4, "model": None},
    {"messages": None},
    {"messages": _MSG, "max_completion_tokens": 4, "max_tokens": None, "seed": None, "stream_options": None},
    # messages: the union of sglang's two message models
    {"messages": []},
    {"messages": [{"content": "hi"}], "max_tokens": 4},
    {"messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 4},
    {"messages": [{"role": "user", "content": 5}], "max_tokens": 4},
    {"messages": [{"role": "USER", "content": "hi"}], "max_tokens": 4},
    {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], "max_tokens": 4},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "max_tokens": 4},
    {"messages": [{"role": "assistant", "content": None}, {"role": "user", "content": "hi"}], "max_tokens": 4},
    {"messages": ["hi"], "max_tokens": 4},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}],
     "max_tokens": 4},
    # stop, logit_bias
    {**_M4, "stop": 5},
    {**_M4, "stop": ["a", 5]},
    {**_M4, "stop": "\n\n"},
    {**_M4, "stop": _STOPS_33},
    {**_M4, "logit_bias": "x"},
    {**_M4, "logit_bias": {"5": "big"}},
)
_CHAT_SAMPLING: tuple[dict[str, Any], ...] = (
    {**_M4, "temperature": -1},
    {**_M4, "temperature": 0.7, "top_p": 0.95},
    {**_M4, "top_p": 0},
    {**_M4, "top_p": 1.5},
    {**_M4, "min_p": 2},
    {**_M4, "top_k": 0},
    {**_M4, "top_k": -1},
    {**_M4, "frequency_penalty": 3},
    {**_M4, "presence_penalty": -2.5},
    {**_M4, "repetition_penalty": 0},
    {**_M4, "repetition_penalty": 2.5},
    {"messages": _MSG, "min_tokens": 10, "max_tokens": 5},
    {**_M4, "min_tokens": -1},
    {"messages": _MSG, "max_tokens": -1},
    {"messages": _MSG, "max_tokens": 0},
    {"messages": _MSG, "max_completion_tokens": 0, "max_tokens": 3},
    {**_M4, "logit_bias": {"1000000000": 1}},
    {**_M4, "logit_bias": {"5": 1e9}},
    {**_M4, "logit_bias": {"x": 1}},
    {**_M4, "seed": 2**63},
    {"messages": _MSG, "max_tokens": 300000},
    {**_M4, "temperature": -1, "top_p": 0},
)
_COMPLETIONS: tuple[dict[str, Any], ...] = (
    {"model": "m"},
    {"prompt": [1, 2, 3], "max_tokens": 4},
    {"prompt": ["a", "b"], "max_tokens": 4},
    {"prompt": "hi", "ignore_eos": "x", "seed": "y"},
    {**_P4, "stream_options": {"continuous_usage_stats": "x"}},
    {**_P4, "temperature": "abc"},
    {"prompt": "hi", "max_tokens": "x"},
    {"prompt": None},
    {"prompt": 5},
    {**_P4, "stream": "maybe"},
    {"prompt": "hi", "max_tokens": 0},
    {"prompt": "hi", "max_tokens": -3},
    {"prompt": ""},
    {"prompt": []},
    {"prompt": [""]},
    {**_P4, "echo": "x"},
    {**_P4, "echo": True},
    {**_P4, "temperature": -1},
    {**_P4, "top_p": 1.5},
    {**_P4, "stop": 5},
    {**_P4, "logit_bias": {"163840": 1}},
    {"prompt": "hi"},
)
_GENERATE: tuple[dict[str, Any], ...] = (
    {"text": "x", "sampling_params": _G4},
    {"input_ids": [1, 2, 3], "sampling_params": _G4},
    {"text": "x", "sampling_params": {**_G4, "temperature": -1}},
    {"text": "x", "sampling_params": {**_G4, "temperature": "hot"}},
    {"text": "x", "sampling_params": {**_G4, "top_k": 0}},
    {"text": "x", "sampling_params": {**_G4, "top_p": 0}},
    {"text": "x", "sampling_params": {"max_new_tokens": -1}},
    {"text": "x", "sampling_params": {**_G4, "stop": 5}},
    {"text": "x", "sampling_params": {**_G4, "foo": 1}},
    {"text": "x", "sampling_params": {**_G4, "logit_bias": {"5": "big"}}},
    {"text": "x", "sampling_params": {**_G4, "min_new_tokens": 9}},
    {"text": "x", "sampling_params": "fast"},
    {"text": "x", "stream": "yes", "sampling_params": _G4},
    {"text": 5},
    {"input_ids": "abc", "sampling_params": _G4},
    {"input_ids": [1, "a"], "sampling_params": _G4},
    {"input_ids": [1, 2.5], "sampling_params": _G4},
    {"input_ids": ["a"], "sampling_params": _G4},
    {"input_ids": [[1, 2], [3, "x"]], "sampling_params": _G4},
    {"input_ids": [1, 2**70], "sampling_params": _G4},
    {"sampling_params": _G4},
    {"text": "x", "sampling_params": {**_G4, "temperature": None, "top_p": None}},
)
_DDTREE: tuple[tuple[str, dict[str, Any]], ...] = (
    (CHAT, _M4),
    (CHAT, {**_M4, "temperature": 0}),
    (CHAT, {**_M4, "temperature": 0.7, "top_p": 0.95}),
    (CHAT, {**_M4, "temperature": 0.7, "top_k": 1}),
    (CHAT, {"messages": _MSG, "max_tokens": -1}),
    (CHAT, {**_M4, "temperature": -1}),
    (CHAT, {**_M4, "temperature": 0, "top_p": 1.5}),
    (CHAT, {**_M4, "temperature": 0, "frequency_penalty": 0.5}),
    (CHAT, {**_M4, "temperature": 0, "min_tokens": 3}),
    (CHAT, {**_M4, "temperature": 0, "response_format": {"type": "json_object"}}),
    (CHAT, {**_M4, "temperature": 0, "regex": "[a-z]+"}),
    (CHAT, {**_M4, "stream": True}),
    (CHAT, {"messages": []}),
    (COMPLETIONS, {**_P4, "temperature": 0, "frequency_penalty": 1}),
    (COMPLETIONS, {**_P4, "temperature": 0.5, "stream": True}),
    (COMPLETIONS, {**_P4, "temperature": 0}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0, "frequency_penalty": 1}}),
    (GENERATE, {"text": "x", "stream": True, "sampling_params": {**_G4, "temperature": 0.5}}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0.9, "top_k": 1}}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0, "regex": "a+"}}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0, "custom_params": {"thinking_budget": 64}}}),
    (GENERATE, {"text": "x", "sampling_params": _G4}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 1}}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0}, "custom_logit_processor": "x"}),
    (GENERATE, {"text": "x", "sampling_params": {"max_new_tokens": -1, "temperature": 0.5}}),
    (GENERATE, {"text": "x", "sampling_params": {**_G4, "temperature": 0, "repetition_penalty": 1.2}}),
)
TRANSPORT: tuple[dict[str, Any], ...] = (
    {"path": CHAT, "raw": '{"messages": [', "mode": "dflash"},
    {"path": CHAT, "raw": "[1, 2]", "mode": "dflash"},
    {"path": CHAT, "raw": '{"messages": []}', "mode": "dflash", "headers": {"Content-Type": "text/plain"}},
    {"path": COMPLETIONS, "raw": '"hi"', "mode": "dflash"},
    {"path": GENERATE, "raw": '{"text": "x", ', "mode": "dflash"},
    {"path": GENERATE, "raw": "[1, 2]", "mode": "dflash"},
)

REQUEST_CASES: tuple[dict[str, Any], ...] = (
    *(_case(CHAT, b) for b in _CHAT_TYPES),
    *(_case(CHAT, b) for b in _CHAT_SAMPLING),
    *(_case(COMPLETIONS, b) for b in _COMPLETIONS),
    *(_case(GENERATE, b) for b in _GENERATE),
    *(_case(path, b, "ddtree") for path, b in _DDTREE),
    *TRANSPORT,
)
