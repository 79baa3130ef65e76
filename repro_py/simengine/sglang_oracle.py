"""sglang 0.5.23's own request validation, run on CPU: the oracle the simulated engine is compared with.

Run only under the CPU sglang venv's Python, with a pristine 0.5.23 tree plus
the patch series first on ``sys.path`` (``refgen`` and
``tests/simengine/test_request_parity.py`` arrange that)::

    python -m repro_py.simengine.sglang_oracle < cases.json > verdicts.json

What answers each request body is sglang's code, in sglang's order:

- the HTTP layer: a FastAPI app whose routes (``/v1/chat/completions``,
  ``/v1/completions``, ``/generate``), content-type dependency and
  ``RequestValidationError`` handler are the functions of
  ``sglang/srt/entrypoints/http_server.py`` itself, read out of the file and
  executed (the module cannot be imported on CPU: it pulls in every
  multimodal processor), so the request models are parsed and refused by
  pydantic exactly as the server does, and ``/generate`` bodies go through the
  generated API contract (``generate_contract_error``);
- the serving layer: the real ``OpenAIServingChat`` / ``OpenAIServingCompletion``
  classes (``handle_request``, ``_validate_request``, ``_convert_to_internal_request``,
  ``to_sampling_params``, the streaming and non-streaming handlers);
- the tokenizer manager: the real ``TokenizerManager.generate_request`` (batch
  normalisation, priority, LoRA, the context-length checks, ``SamplingParams``
  construction, ``normalize``, ``verify``, the watermark check and, with the
  series applied and a DDTree budget resolved, patch 0010's refusal) under a
  runtime context resolved from the bundle's own command line.

Stand-ins, named so nobody mistakes them: the model (its tokenizer is the
simulated engine's own, ``repro_py.simengine.tokenizer``; its chat template is
the simulated engine's ``render_chat``; its vocabulary size and context length
are the simulated model's), and the scheduler: a request that passes every
check is not sent anywhere; the oracle records it as admitted (HTTP 200).
"""

# ruff: noqa: PLC0415 -- sglang, fastapi and pydantic come from the CPU venv at run time

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import sys
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from repro_py.simengine import tokenizer

REPO_ROOT = Path(__file__).resolve().parents[2]
HTTP_FUNCTIONS = (
    "validate_json_request",
    "_create_error_response",
    "generate_request",
    "serve_generate_request",
    "openai_v1_completions",
    "openai_v1_chat_completions",
)
#: the ``RequestValidationError`` handler (http_server.py has two functions of that name)
VALIDATION_HANDLER = "app.exception_handler(RequestValidationError)"
DDTREE_CONTEXT = (8, 16)  # block size, budget: the runtime context patch 0010 reads
DFLASH_CONTEXT = (8, None)


class Admitted(Exception):
    """Raised where the tokenizer manager would send the tokenized request to the scheduler (after
    recording it): what the route makes of the exception afterwards is not sglang's answer."""


def http_server_file() -> Path:
    import sglang

    return Path(sglang.__file__).parent / "srt" / "entrypoints" / "http_server.py"


def http_functions() -> Any:
    """The route, dependency and handler functions of http_server.py, as a module of their own that
    keeps the file's name and line numbers (FastAPI puts both into every validation message)."""
    path = http_server_file()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    keep: list[ast.stmt] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        decorators = [ast.unparse(d) for d in node.decorator_list]
        if node.name in HTTP_FUNCTIONS or VALIDATION_HANDLER in decorators:
            keep.append(node)
    names = {n.name for n in keep if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    missing = sorted(set(HTTP_FUNCTIONS) - names)
    if missing or len(keep) != len(HTTP_FUNCTIONS) + 1:
        raise SystemExit(f"sglang_oracle: {path} no longer defines {missing or 'the validation handler'}")
    return compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec")


class _Tokenizer:
    """The simulated model's tokenizer, behind the interface the tokenizer manager calls."""

    is_fast = False
    eos_token_id = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return tokenizer.encode(text)


class _States(dict):  # type: ignore[type-arg]
    def __missing__(self, rid: str) -> Any:
        stats = types.SimpleNamespace(set_tokenize_finish_time=lambda: None)
        return types.SimpleNamespace(time_stats=stats, prompt_token_ids=None)


class _Unlocked:
    """The model-update lock with no weight update in flight."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def _tokenizer_manager(vocab_size: int, context_len: int) -> Any:
    """The real TokenizerManager class around the attributes its request path reads."""
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.sampling.sampling_params import SamplingParams

    tm = TokenizerManager.__new__(TokenizerManager)
    attrs: dict[str, Any] = {
        "tokenizer": _Tokenizer(),
        "preferred_sampling_params": None,
        "sampling_params_class": SamplingParams,
        "tokenized_generate_req_type": types.SimpleNamespace,
        "fake_bootstrap_room_counter": 0,
        "model_config": types.SimpleNamespace(
            vocab_size=vocab_size, is_multimodal=False, hf_config=types.SimpleNamespace(architectures=["Sim"]),
            joint_head_config=None, pointer_head=None, get_default_sampling_params=dict, is_embedding_gemma=False,
        ),
        "context_len": context_len,
        "num_reserved_tokens": 0,
        "allow_auto_truncate": False,
        "validate_total_tokens": True,
        "max_req_input_len": context_len - 1,
        "mm_processor": None,
        "async_dynamic_batch_tokenizer": None,
        "is_generation": True,
        "enable_lora": False,
        "enable_priority_scheduling": False,
        "default_priority_value": None,
        "elastic_worker_count": 1,
        "rid_to_state": _States(),
        "is_pause": False,
        "is_pause_cond": asyncio.Condition(),
        "model_update_lock": types.SimpleNamespace(reader_lock=_Unlocked()),
        "request_logger": types.SimpleNamespace(
            log_received_request=lambda *a, **k: None, log_requests=False, log_requests_level=0
        ),
        "served_model_name": "default",
        "server_args": None,
    }
    for name, value in attrs.items():
        setattr(tm, name, value)
    tm.auto_create_handle_loop = lambda: None
    tm._init_req_state = lambda obj, request: None
    tm._release_req_states_on_failure = lambda states: None
    tm.create_abort_task = lambda obj: None

    async def send(tokenized: Any) -> None:
        tm.admitted.append(tokenized)
        raise Admitted("admitted")

    tm.admitted = []

    tm._send_one_request = send
    return tm


def _serving(tm: Any) -> tuple[Any, Any]:
    """The real serving classes, built around the stand-in model."""
    from sglang.srt.entrypoints.openai.protocol import MessageProcessingResult
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.serving_completions import OpenAIServingCompletion

    from repro_py.simengine import openai_shapes

    common = {"tokenizer_manager": tm, "allowed_custom_labels": None}
    template = types.SimpleNamespace(completion_template_name=None, reasoning_config=None, chat_template_name=None)
    completion = OpenAIServingCompletion.__new__(OpenAIServingCompletion)
    completion.__dict__.update(common, template_manager=template)
    chat = OpenAIServingChat.__new__(OpenAIServingChat)
    chat.__dict__.update(
        common, template_manager=template, tool_call_parser=None, reasoning_parser=None,
        default_chat_template_kwargs={}, default_sampling_params={}, is_gpt_oss=False, is_gemma4=False,
        is_minimax_m3=False, chat_encoding_spec=None, supports_inline_system=True, _encoding_adapter=None,
        _response_parser=None, _reasoning_detector=None, _tokenizer_auto_adds_specials=False,
        _prompt_text_round_trip_is_lossy=False, _template_reads_reasoning_content=False, _chat_template_cache={},
    )  # fmt: skip

    def process_messages(request: Any, is_multimodal: bool, **_: Any) -> Any:
        """The chat template stand-in: the simulated engine's rendering, encoded by its tokenizer."""
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        prompt = openai_shapes.render_chat(messages)[0]
        stop = request.stop
        return MessageProcessingResult(
            prompt=prompt, prompt_ids=tokenizer.encode(prompt), image_data=None, audio_data=None,
            video_data=None, modalities=[], stop=stop,
        )  # fmt: skip

    chat._process_messages = process_messages
    return chat, completion


def build_app(ddtree: bool, *, vocab_size: int, context_len: int) -> Any:
    from fastapi import Depends, FastAPI, Request
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import ORJSONResponse, StreamingResponse
    from sglang.srt.entrypoints.api_contract import generate_contract_error
    from sglang.srt.entrypoints.openai import protocol
    from sglang.srt.environ import envs
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.utils import json_response

    app = FastAPI()
    tm = _tokenizer_manager(vocab_size, context_len)
    app.state.tokenizer_manager = tm
    app.state.openai_serving_chat, app.state.openai_serving_completion = _serving(tm)
    namespace: dict[str, Any] = {
        "__name__": "sglang_oracle_http_server",
        "app": app, "Depends": Depends, "Request": Request, "RequestValidationError": RequestValidationError,
        "ORJSONResponse": ORJSONResponse, "StreamingResponse": StreamingResponse,
        "jsonable_encoder": jsonable_encoder, "HTTPStatus": __import__("http").HTTPStatus,
        "ErrorResponse": protocol.ErrorResponse, "ChatCompletionRequest": protocol.ChatCompletionRequest,
        "CompletionRequest": protocol.CompletionRequest, "GenerateReqInput": GenerateReqInput,
        "generate_contract_error": generate_contract_error, "envs": envs, "AsyncIterator": AsyncIterator,
        "SGLangORJSONResponse": json_response.SGLangORJSONResponse, "dumps_json": json_response.dumps_json,
        "orjson_response": json_response.orjson_response, "model_json_response": json_response.model_json_response,
        "logger": types.SimpleNamespace(info=lambda *a, **k: None, error=lambda *a, **k: None),
        "_global_state": types.SimpleNamespace(tokenizer_manager=tm),
        "apply_header_overrides": lambda obj, headers: None,
    }  # fmt: skip
    exec(http_functions(), namespace)
    app.state.ddtree = ddtree
    return app


@contextlib.contextmanager
def runtime_context(ddtree: bool) -> Iterator[None]:
    """The bundle's command line (DDTree or plain DFLASH), parsed and resolved by the patched sglang."""
    import kv_window_sim  # type: ignore[import-not-found]  # patches/tools, put on sys.path by main()
    from sglang.srt.runtime_context import use_context

    block, budget = DDTREE_CONTEXT if ddtree else DFLASH_CONTEXT
    with use_context(kv_window_sim.resolved_context(block, budget)):
        yield


def _answer(client: Any, case: dict[str, Any]) -> dict[str, Any]:
    headers = case.get("headers") or {"Content-Type": "application/json"}
    data = case["raw"] if "raw" in case else json.dumps(case["body"])
    admitted: list[Any] = client.app.state.tokenizer_manager.admitted
    before = len(admitted)
    resp = client.post(case["path"], content=data.encode(), headers=headers)
    if len(admitted) > before:
        return {"status": 200, "admitted": True}
    text = resp.text
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return {"status": resp.status_code, "admitted": False, "body": body}


def run(cases: list[dict[str, Any]], *, vocab_size: int, context_len: int) -> list[dict[str, Any]]:
    """The verdict of sglang's own code on each case (``path``, ``body`` or ``raw``, ``mode``: dflash|ddtree)."""
    from fastapi.testclient import TestClient

    out: list[dict[str, Any]] = []
    for mode in ("dflash", "ddtree"):
        app = build_app(mode == "ddtree", vocab_size=vocab_size, context_len=context_len)
        client = TestClient(app, raise_server_exceptions=False)  # an unhandled exception is a 500, as in sglang
        with runtime_context(mode == "ddtree"):
            for index, case in enumerate(cases):
                if case.get("mode", "dflash") == mode:
                    out.append({"index": index, **_answer(client, case)})
    out.sort(key=lambda v: int(v["index"]))
    return [{k: v for k, v in verdict.items() if k != "index"} for verdict in out]


def main() -> int:
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))
    import cpu_import_shims  # type: ignore[import-not-found]

    cpu_import_shims.install_torchvision_stand_in()  # sglang's model configs import torchvision (absent on CPU)
    request = json.load(sys.stdin)
    asyncio.set_event_loop(asyncio.new_event_loop())
    verdicts = run(request["cases"], vocab_size=int(request["vocab_size"]), context_len=int(request["context_len"]))
    json.dump(verdicts, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
