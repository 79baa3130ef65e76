"""The request-validation part of ``sglang_reference.json``, read from the sglang 0.5.23 wheel (for ``refgen``).

``protocol``   the request models' fields (order, nullability), the member tags and
               order of the union fields pydantic reports errors under, the generic
               message roles; the route functions' line numbers in ``http_server.py``
               (FastAPI names them in every validation message); the ``/generate`` API
               contract's decoders (``sglang/api/v1/api_types.py``, generated code, read
               as source); and ``cases``: sglang's own verdict (status and error body) on
               every request body of ``refgen_cases.REQUEST_CASES``, from ``sglang_oracle``.

The serving modules the oracle imports need ``jsonschema`` and ``xgrammar``, which the
CPU venv does not carry; they are installed on first use, pinned and without
dependencies, into ``.cache/sglang-protocol-deps`` (git-ignored; ``SGLANG_PROTOCOL_DEPS``
names another directory), never into the venv.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from repro_py.simengine import tokenizer
from repro_py.simengine.refgen_cases import REQUEST_CASES

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_DEPS = Path(os.environ.get("SGLANG_PROTOCOL_DEPS", REPO_ROOT / ".cache" / "sglang-protocol-deps"))
# Imported by serving_chat (jsonschema) and its tool-call parsers (xgrammar); not in the CPU venv.
# xgrammar is sglang 0.5.23's own pin; jsonschema and its helpers are the controller lock's versions.
PROTOCOL_PINS = (
    "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1",
    "xgrammar==0.2.7",
)  # fmt: skip
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"
ROUTES = {
    "/v1/chat/completions": "openai_v1_chat_completions",
    "/v1/completions": "openai_v1_completions",
    "/generate": "generate_request",
}
#: the simulated model the oracle stands in for (the test engines' defaults: simengine/fixtures.py)
PARITY_MODEL = {"vocab_size": tokenizer.VOCAB_SIZE, "context_len": 262144}
SITE_PACKAGES = "{site_packages}"  # stands for the directory sglang is installed in

PROBE = r"""
import json, sys, typing, dataclasses
sys.path.insert(0, sys.argv[1])
import cpu_import_shims
cpu_import_shims.install_torchvision_stand_in()
from pydantic import TypeAdapter, ValidationError
from sglang.srt.entrypoints.openai import protocol as P
from sglang.srt.entrypoints.openai import serving_chat as SC
from sglang.srt.managers.io_struct import GenerateReqInput
models = {"/v1/chat/completions": P.ChatCompletionRequest, "/v1/completions": P.CompletionRequest}
def tags(validate, body, prefix):
    try:
        validate(body)
    except ValidationError as exc:
        out = []
        for e in exc.errors():
            loc = e["loc"]
            if tuple(loc[:len(prefix)]) == prefix and len(loc) > len(prefix) and loc[len(prefix)] not in out:
                out.append(loc[len(prefix)])
        return out
    raise SystemExit(f"probe: {body!r} was accepted")
chat = P.ChatCompletionRequest.model_validate
gen = TypeAdapter(GenerateReqInput).validate_python
member = tags(chat, {"messages": [5]}, ("messages", 0))
hints = typing.get_type_hints(GenerateReqInput, include_extras=True)
def nullable(annotation):
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return nullable(args[0])
    return type(None) in args
print(json.dumps({
    "error_response_fields": list(P.ErrorResponse.model_fields),
    "usage_fields": list(P.UsageInfo.model_fields),
    "stream_options_fields": list(P.StreamOptions.model_fields),
    "request_fields": {
        **{path: list(model.model_fields) for path, model in models.items()},
        "/generate": [f.name for f in dataclasses.fields(GenerateReqInput)],
    },
    "request_nullable": {
        **{path: [name for name, f in model.model_fields.items() if nullable(f.annotation)]
           for path, model in models.items()},
        "/generate": [f.name for f in dataclasses.fields(GenerateReqInput) if nullable(hints[f.name])],
    },
    "unions": {
        "message": member,
        "content": tags(chat, {"messages": [{"role": "user", "content": 5}]}, ("messages", 0, member[1], "content")),
        "/v1/chat/completions.stop": tags(chat, {"messages": [], "stop": 5}, ("stop",)),
        "/v1/completions.stop": tags(P.CompletionRequest.model_validate, {"prompt": "p", "stop": 5}, ("stop",)),
        "/v1/completions.prompt": tags(P.CompletionRequest.model_validate, {"prompt": 5}, ("prompt",)),
        "/generate.text": tags(gen, {"text": 5}, ("text",)),
        "/generate.sampling_params": tags(gen, {"sampling_params": 5}, ("sampling_params",)),
        "/generate.rid": tags(gen, {"rid": 5}, ("rid",)),
    },
    "generic_roles": list(P._GENERIC_MESSAGE_ROLES),
    "media_part_types": sorted(SC._MEDIA_CONTENT_PART_TYPES),
}))
"""


def endpoints(tree: Path) -> dict[str, dict[str, Any]]:
    """Each route function's name and the line FastAPI reports for it (its first decorator)."""
    module = ast.parse((tree / HTTP_SERVER).read_text(encoding="utf-8"))
    lines = {
        node.name: min([d.lineno for d in node.decorator_list] or [node.lineno])
        for node in module.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    missing = [name for name in ROUTES.values() if name not in lines]
    if missing:
        raise SystemExit(f"refgen: {HTTP_SERVER} no longer defines {missing}")
    return {path: {"function": name, "line": lines[name]} for path, name in ROUTES.items()}


def _decoder(module: ast.Module, name: str) -> list[list[str]]:
    """``[key, expression]`` for each ``key == "k": kw["k"] = <expression>`` branch of ``decode_<name>``."""
    func = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == f"decode_{name}")
    out: list[list[str]] = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
            continue
        right = node.test.comparators[0]
        first = node.body[0]
        if isinstance(right, ast.Constant) and isinstance(first, ast.Assign):
            out.append([str(right.value), ast.unparse(first.value)])
    return out


def contract(tree: Path) -> dict[str, Any]:
    """The generated ``/generate`` decoders: per struct, ``[key, expression]`` and the known keys."""
    module = ast.parse((tree / "sglang" / "api" / "v1" / "api_types.py").read_text(encoding="utf-8"))
    def fields(name: str) -> list[str]:
        return list(next(
            ast.literal_eval(n.value) for n in module.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == f"_FIELDS_{name}"
        ))  # fmt: skip

    return {
        "GenerateRequest": _decoder(module, "GenerateRequest"),
        "SamplingParams": _decoder(module, "SamplingParams"),
        "SamplingParams_fields": fields("SamplingParams"),
        "WatermarkRequestConfig": _decoder(module, "WatermarkRequestConfig"),
        "WatermarkRequestConfig_fields": fields("WatermarkRequestConfig"),
    }


def protocol_deps(python: str = sys.executable) -> Path:
    """The directory with ``PROTOCOL_PINS`` for ``python`` (the CPU venv's), installed there on first use."""
    missing = [pin for pin in PROTOCOL_PINS if not any(PROTOCOL_DEPS.glob(_dist_info(pin)))]
    if missing:
        PROTOCOL_DEPS.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--target",
             str(PROTOCOL_DEPS), *PROTOCOL_PINS],
            check=True, timeout=900,
        )  # fmt: skip
    return PROTOCOL_DEPS


def _dist_info(pin: str) -> str:
    name, version = pin.split("==")
    return f"{name.replace('-', '_')}-{version}.dist-info"


def sglang_env(tree: Path, python: str = sys.executable) -> dict[str, str]:
    """The environment that runs sglang from ``tree`` (the patched package) with the protocol deps."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(protocol_deps(python)), str(REPO_ROOT)])
    return env


def oracle_verdicts(tree: Path, cases: list[dict[str, Any]], python: str = sys.executable) -> list[dict[str, Any]]:
    """sglang's own verdict on each case (``sglang_oracle`` run by ``python``, the CPU venv's), the directory
    sglang is installed in written as ``{site_packages}``."""
    request = json.dumps({"cases": cases, **PARITY_MODEL})
    proc = subprocess.run(
        [python, "-m", "repro_py.simengine.sglang_oracle"], input=request, capture_output=True, text=True,
        env=sglang_env(tree, python), cwd=REPO_ROOT, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"refgen: sglang_oracle failed:\n{proc.stderr[-3000:]}")
    text = proc.stdout.strip().splitlines()[-1]
    for prefix in {str(tree.resolve()), str(tree)}:
        text = text.replace(json.dumps(prefix)[1:-1], SITE_PACKAGES)
    verdicts: list[dict[str, Any]] = json.loads(text)
    return verdicts


def generate(tree: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO_ROOT / "patches" / "tools")], capture_output=True, text=True,
        env=sglang_env(tree), timeout=600, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"refgen: protocol probe failed:\n{proc.stderr[-3000:]}")
    models: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    cases = [dict(c) for c in REQUEST_CASES]
    verdicts = oracle_verdicts(tree, cases)
    return {
        **models,
        "http_server": HTTP_SERVER,
        "endpoints": endpoints(tree),
        "contract": contract(tree),
        "parity_model": PARITY_MODEL,
        "cases": [{**case, "expect": verdict} for case, verdict in zip(cases, verdicts, strict=True)],
    }
