"""Request-body validation as sglang 0.5.23 does it: pydantic models behind FastAPI.

A body that fails the model is answered ``400`` with sglang's legacy
``ErrorResponse`` shape (``{"object": "error", "message", "type": "Bad Request",
"param": null, "code": 400}``), the message being FastAPI's
``RequestValidationError`` text followed by the error list, as sglang's
``validation_exception_handler`` builds it. Only the fields the simulated
engine reads are checked, with pydantic's lax-mode rules (a numeric string is
a number, ``"yes"`` is a boolean, ``2.0`` is an integer, ``1.5`` is not);
errors come in the model's field order. ``tests/simengine`` checks every case
recorded from the real models in ``sglang_reference.json``.
"""

from __future__ import annotations

import math
from typing import Any

from repro_py.simengine import sglang_reference

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"

_BOOL_STRINGS = {
    "0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
    "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True,
}
_COMMON: dict[str, str] = {
    "model": "str",
    "frequency_penalty": "float",
    "presence_penalty": "float",
    "max_tokens": "int",
    "n": "int",
    "seed": "int",
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
    COMPLETIONS_PATH: {**_COMMON, "prompt": "prompt"},
}
REQUIRED: dict[str, tuple[str, ...]] = {CHAT_PATH: ("messages",), COMPLETIONS_PATH: ("prompt",)}
_PROMPT_UNION = ("list[int]", "list[list[int]]", "str", "list[str]")


def _err(kind: str, loc: tuple[str | int, ...], msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}


def _float(value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    if isinstance(value, int | float):
        return []
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            return [_err("float_parsing", loc, "Input should be a valid number, unable to parse string as a number",
                         value)]
        return []
    return [_err("float_type", loc, "Input should be a valid number", value)]


def _int(value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    if isinstance(value, bool | int):
        return []
    if isinstance(value, float):
        if not math.isfinite(value):
            return [_err("finite_number", loc, "Input should be a finite number", value)]
        if value != int(value):
            return [_err("int_from_float", loc, "Input should be a valid integer, got a number with a fractional part",
                         value)]
        return []
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number == int(number)):
            return [_err("int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer",
                         value)]
        return []
    return [_err("int_type", loc, "Input should be a valid integer", value)]


def _bool(value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        if value in (0, 1):
            return []
        return [_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value)]
    if isinstance(value, str):
        if value.lower() in _BOOL_STRINGS:
            return []
        return [_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value)]
    return [_err("bool_type", loc, "Input should be a valid boolean", value)]


def _prompt(value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return []
    if isinstance(value, list) and (
        all(isinstance(x, int) and not isinstance(x, bool) for x in value)
        or all(isinstance(x, str) for x in value)
        or all(isinstance(x, list) and all(isinstance(y, int) for y in x) for x in value)
    ):
        return []
    errors: list[dict[str, Any]] = []
    for member in _PROMPT_UNION:
        if member == "str":
            errors.append(_err("string_type", (*loc, member), "Input should be a valid string", value))
        else:
            errors.append(_err("list_type", (*loc, member), "Input should be a valid list", value))
    return errors


def _check(kind: str, value: Any, loc: tuple[str | int, ...]) -> list[dict[str, Any]]:
    if kind == "float":
        return _float(value, loc)
    if kind == "int":
        return _int(value, loc)
    if kind == "bool":
        return _bool(value, loc)
    if kind == "str":
        return [] if isinstance(value, str) else [_err("string_type", loc, "Input should be a valid string", value)]
    if kind == "dict":
        return [] if isinstance(value, dict) else [_err("dict_type", loc, "Input should be a valid dictionary", value)]
    if kind == "messages":
        return [] if isinstance(value, list) else [_err("list_type", loc, "Input should be a valid list", value)]
    if kind == "prompt":
        return _prompt(value, loc)
    if kind == "stream_options":
        if not isinstance(value, dict):
            return [_err("model_type", loc, "Input should be a valid dictionary or instance of StreamOptions", value)]
        errors: list[dict[str, Any]] = []
        for key in ("include_usage", "continuous_usage_stats"):
            if value.get(key) is not None:
                errors += _bool(value[key], (*loc, key))
        return errors
    raise ValueError(f"unknown field kind {kind!r}")


def validate(path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """pydantic-style errors (``type``, ``loc``, ``msg``, ``input``) for ``body``; empty when it is accepted."""
    fields = FIELDS[path]
    nullable = sglang_reference.nullable_fields(path)
    errors: list[dict[str, Any]] = []
    for name in sglang_reference.request_fields(path):
        if name in REQUIRED[path] and name not in body:
            errors.append(_err("missing", (name,), "Field required", body))
            continue
        kind = fields.get(name)
        if kind is None or name not in body or (body[name] is None and name in nullable):
            continue
        errors += _check(kind, body[name], (name,))
    return errors


def _coerced(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "float":
        return float(value.strip()) if isinstance(value, str) else float(value)
    if kind == "int":
        return int(float(value.strip())) if isinstance(value, str) else int(value)
    if kind == "bool":
        return _BOOL_STRINGS[value.lower()] if isinstance(value, str) else bool(value)
    if kind == "stream_options":
        return {k: _coerced("bool", v) if k in ("include_usage", "continuous_usage_stats") else v
                for k, v in value.items()}
    return value


def coerce(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A copy of an accepted body with the checked fields in their model types (``"0.5"`` -> 0.5, ``"yes"`` -> True)."""
    fields = FIELDS[path]
    return {k: _coerced(fields[k], v) if k in fields else v for k, v in body.items()}


def fastapi_message(errors: list[dict[str, Any]]) -> str:
    """sglang's ``validation_exception_handler`` message: ``f"{str(exc)} {str(exc.errors())}"``."""
    head = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n"
    text = head + "".join(f"  {err}\n" for err in errors)
    return f"{text.rstrip()} {errors}"


def error_body(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The 400 body for a refused request (sglang's ``ErrorResponse``)."""
    return {"object": "error", "message": fastapi_message(errors), "type": "Bad Request", "param": None, "code": 400}
