"""Request-body validation as sglang 0.5.23's FastAPI layer does it: its pydantic models, then its 400.

A body that fails the request model is answered ``400`` with sglang's legacy
``ErrorResponse`` shape (``{"object": "error", "message", "type": "Bad Request",
"param": null, "code": 400}``), the message being FastAPI's
``RequestValidationError`` text (the error list, then the route's file, line,
function and ``METHOD path``) followed by the error list again, as sglang's
``validation_exception_handler`` builds it.

What is checked, with pydantic's lax-mode rules and texts (``pydantic_lax``),
in the model's field order (``sglang_reference``: recorded from the wheel,
as are the union members' tags and order and the routes' line numbers): the
fields the simulated engine reads, ``messages`` as the union of sglang's two
message models (role and content; content parts other than text are not
checked), ``stop``, ``logit_bias``, ``echo``, ``/v1/completions``' positive
``max_tokens``, and on ``/generate`` the ``GenerateReqInput`` fields ``rid``,
``text``, ``input_ids`` (sglang's own plain validator), ``sampling_params`` and
``stream``. Fields the engine does not read
are not checked (documented in docs/simengine.md). ``tests/simengine/
test_request_parity.py`` holds the engine to sglang's own verdicts.
"""

from __future__ import annotations

import sysconfig
from array import array
from typing import Any

from repro_py.simengine import pydantic_lax as lax
from repro_py.simengine import sglang_reference

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
GENERATE_PATH = "/generate"

_COMMON: dict[str, str] = {
    "model": "str",
    "frequency_penalty": "float",
    "presence_penalty": "float",
    "logit_bias": "float_map",
    "max_tokens": "int",
    "n": "int",
    "seed": "int",
    "stop": "stop",
    "stream": "bool",
    "stream_options": "stream_options",
    "temperature": "float",
    "top_p": "float",
    "top_k": "int",
    "min_p": "float",
    "min_tokens": "int",
    "repetition_penalty": "float",
    "ignore_eos": "bool",
}
FIELDS: dict[str, dict[str, str]] = {
    CHAT_PATH: {
        **_COMMON,
        "messages": "messages",
        "max_completion_tokens": "int",
        "separate_reasoning": "bool",
        "chat_template_kwargs": "dict",
    },
    COMPLETIONS_PATH: {**_COMMON, "prompt": "prompt", "echo": "bool"},
    GENERATE_PATH: {
        "rid": "rid", "text": "text", "input_ids": "token_ids", "sampling_params": "sampling_params", "stream": "bool",
    },
}
REQUIRED: dict[str, tuple[str, ...]] = {CHAT_PATH: ("messages",), COMPLETIONS_PATH: ("prompt",), GENERATE_PATH: ()}
# pydantic's tag of each union field, recorded per route (protocol.unions)
_UNIONS = {"prompt": "prompt", "stop": "stop", "text": "text", "sampling_params": "sampling_params", "rid": "rid"}


def _role_errors(message: dict[str, Any], loc: lax.Loc, generic: bool) -> list[lax.Error]:
    if "role" not in message:
        return [lax.err("missing", (*loc, "role"), "Field required", message)]
    role = message["role"]
    if not generic:  # Literal["user"]
        if role == "user":
            return []
        return [lax.err("literal_error", (*loc, "role"), "Input should be 'user'", role, {"expected": "'user'"})]
    if not isinstance(role, str):
        return [lax.value_error((*loc, "role"), "'role' must be a string", role)]
    roles = sglang_reference.generic_roles()
    if role.lower() in roles:
        return []
    allowed = ", ".join(repr(r) for r in roles)
    return [lax.value_error((*loc, "role"), f"'role' must be one of {allowed} (case-insensitive).", role)]


def _content_errors(message: dict[str, Any], loc: lax.Loc, generic: bool) -> list[lax.Error]:
    if "content" not in message:
        return [] if generic else [lax.err("missing", (*loc, "content"), "Field required", message)]
    content = message["content"]
    if isinstance(content, str | list) or (content is None and generic):
        return []  # the parts of a list are not checked: the engine reads the text parts only
    str_tag, list_tag = sglang_reference.union_tags("content")
    return [
        lax.err("string_type", (*loc, "content", str_tag), "Input should be a valid string", content),
        lax.err("list_type", (*loc, "content", list_tag), "Input should be a valid list", content),
    ]


def _messages(value: Any, loc: lax.Loc) -> list[lax.Error]:
    """``List[Union[ChatCompletionMessageGenericParam, ChatCompletionMessageUserParam]]``."""
    if not isinstance(value, list):
        return lax.list_(value, loc)
    generic_tag, user_tag = sglang_reference.union_tags("message")
    errors: list[lax.Error] = []
    for i, message in enumerate(value):
        per_member: list[lax.Error] = []
        for tag, generic in ((generic_tag, True), (user_tag, False)):
            where = (*loc, i, tag)
            found = lax.model_object(message, where)
            if not found:
                found = _role_errors(message, where, generic) + _content_errors(message, where, generic)
            if not found:
                per_member = []
                break
            per_member += found
        errors += per_member
    return errors


def _stream_options(value: Any, loc: lax.Loc) -> list[lax.Error]:
    if not isinstance(value, dict):
        return lax.model_object(value, loc)
    errors: list[lax.Error] = []
    for key in ("include_usage", "continuous_usage_stats"):
        if value.get(key) is not None:
            errors += lax.bool_(value[key], (*loc, key))
    return errors


def _float_map(value: Any, loc: lax.Loc) -> list[lax.Error]:
    if not isinstance(value, dict):
        return lax.dict_(value, loc)
    return [e for key, item in value.items() for e in lax.float_(item, (*loc, key))]


def _token_ids(value: Any, loc: lax.Loc) -> list[lax.Error]:
    """``GenerateReqInput.input_ids``: sglang's ``validate_optional_list_i64_1d_2d`` (a plain validator)."""

    def one_d(row: Any) -> str | None:
        if row is None:
            return "must not be None"
        if not isinstance(row, list):
            return f"must be list; got {type(row).__name__}"
        if row and not isinstance(row[0], int):
            return f"elements must be int; got {type(row[0]).__name__}"
        try:
            array("q", row)
        except (TypeError, OverflowError) as exc:
            return f"contains non-int64 element: {exc}"
        return None

    if not isinstance(value, list):
        why: str | None = f"must be list or null; got {type(value).__name__}"
    elif not value or isinstance(value[0], int):
        why = one_d(value)
    elif isinstance(value[0], list):
        why = next((f"row {i}: {e}" for i, row in enumerate(value) if (e := one_d(row)) is not None), None)
    else:
        why = f"elements must be int or list; got {type(value[0]).__name__}"
    return [] if why is None else [lax.value_error(loc, why, value)]


def _check(path: str, name: str, kind: str, value: Any) -> list[lax.Error]:
    loc = (name,)
    simple = {"float": lax.float_, "int": lax.int_, "bool": lax.bool_, "str": lax.str_, "dict": lax.dict_}
    if kind in simple:
        return simple[kind](value, loc)
    if kind in _UNIONS:
        return lax.union(sglang_reference.union_tags(f"{path}.{_UNIONS[kind]}"), value, loc)
    if kind == "messages":
        return _messages(value, loc)
    if kind == "stream_options":
        return _stream_options(value, loc)
    if kind == "float_map":
        return _float_map(value, loc)
    if kind == "token_ids":
        return _token_ids(value, loc)
    raise ValueError(f"unknown field kind {kind!r}")


def _after_validators(path: str, name: str, value: Any) -> list[lax.Error]:
    """CompletionRequest.validate_max_tokens_positive."""
    if path == COMPLETIONS_PATH and name == "max_tokens" and value is not None and lax.coerce("int", value) <= 0:
        return [lax.value_error((name,), "max_tokens must be positive", value)]
    return []


def _before_validators(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """ChatCompletionRequest.set_tool_choice_default: it writes ``tool_choice`` into the body pydantic
    then reports (a ``missing`` error shows it)."""
    if path != CHAT_PATH or body.get("tool_choice") is not None:
        return body
    messages = body.get("messages")
    message_tools = isinstance(messages, list) and any(isinstance(m, dict) and m.get("tools") for m in messages)
    return {**body, "tool_choice": "auto" if body.get("tools") is not None or message_tools else "none"}


def validate(path: str, body: dict[str, Any]) -> list[lax.Error]:
    """pydantic-style errors (``type``, ``loc``, ``msg``, ``input``, ``ctx``) for ``body``; empty when accepted."""
    fields = FIELDS[path]
    seen = _before_validators(path, body)
    nullable = sglang_reference.nullable_fields(path)
    errors: list[lax.Error] = []
    for name in sglang_reference.request_fields(path):
        if name in REQUIRED[path] and name not in seen:
            errors.append(lax.err("missing", (name,), "Field required", seen))
            continue
        kind = fields.get(name)
        if kind is None or name not in seen or (seen[name] is None and name in nullable):
            continue
        found = _check(path, name, kind, seen[name])
        errors += found or _after_validators(path, name, seen[name])
    return errors


def coerce(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A copy of an accepted body with the checked fields in their model types (``"0.5"`` -> 0.5, ``"yes"`` -> True)."""
    fields = FIELDS[path]
    out = {k: lax.coerce(fields[k], v) if k in fields else v for k, v in body.items()}
    options = out.get("stream_options")
    if isinstance(options, dict):
        out["stream_options"] = {
            k: lax.coerce("bool", v) if k in ("include_usage", "continuous_usage_stats") else v
            for k, v in options.items()
        }
    return out


def endpoint(path: str, method: str = "POST") -> str:
    """What FastAPI adds after the errors for a route: where sglang's route function is, and the request line.
    The file is sglang's, under this interpreter's site-packages (where a server in this venv has it)."""
    where = sglang_reference.endpoint(path)
    site = sysconfig.get_paths()["purelib"]
    return (
        f'\n  File "{site}/{sglang_reference.http_server_file()}", line {where["line"]}, in {where["function"]}'
        f"\n    {method} {path}"
    )


def fastapi_message(errors: list[lax.Error], where: str = "") -> str:
    """sglang's ``validation_exception_handler`` message: ``f"{str(exc)} {str(exc.errors())}"``."""
    head = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n"
    text = head + "".join(f"  {err}\n" for err in errors) + where
    return f"{text.rstrip()} {errors}"


def error_body(errors: list[lax.Error], where: str = "") -> dict[str, Any]:
    """The 400 body for a refused request (sglang's ``ErrorResponse``)."""
    return {"object": "error", "message": fastapi_message(errors, where), "type": "Bad Request", "param": None,
            "code": 400}  # fmt: skip
