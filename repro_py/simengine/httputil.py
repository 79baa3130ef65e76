"""Small HTTP helpers shared by the engine's handlers, and the crash of a faulted engine."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from aiohttp import web

from repro_py.simengine import validation


class BadRequest(Exception):
    """A request sglang would refuse with 400."""


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json", headers=headers)


def openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> web.Response:
    return json_response(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status}, status
    )


async def read_json(request: web.Request, where: str = "", route: str | None = None) -> dict[str, Any] | web.Response:
    """The JSON object body, or FastAPI's 400 for a body that is not JSON (``json_invalid``) or not an object;
    ``where`` is the route's part of the message (``validation.endpoint``), ``route`` its path."""
    raw = await request.read()
    try:
        body = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        pos = exc.pos if isinstance(exc, json.JSONDecodeError) else 0
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return validation_error(
            [{"type": "json_invalid", "loc": ("body", pos), "msg": "JSON decode error", "input": {},
              "ctx": {"error": msg}}], where,
        )  # fmt: skip
    if not isinstance(body, dict):
        if route == validation.CHAT_PATH:
            # ChatCompletionRequest.set_tool_choice_default runs ``values.get(...)`` before any type check: a
            # JSON array or scalar raises AttributeError there, which FastAPI answers as an unhandled error
            return web.Response(status=500, text="Internal Server Error", content_type="text/plain")
        if route == validation.GENERATE_PATH:
            return validation_error(
                [{"type": "dataclass_type", "loc": ("body",),
                  "msg": "Input should be a dictionary or an instance of GenerateReqInput", "input": body,
                  "ctx": {"class_name": "GenerateReqInput"}}], where,
            )  # fmt: skip
        return validation_error(
            [{"type": "model_attributes_type", "loc": ("body",),
              "msg": "Input should be a valid dictionary or object to extract fields from", "input": body}], where,
        )  # fmt: skip
    return body


def validation_error(errors: list[dict[str, Any]], where: str = "") -> web.Response:
    """sglang's answer to a refused request body: 400 ``ErrorResponse``, type ``Bad Request``."""
    return json_response(validation.error_body(errors, where), 400)


async def validated_body(
    request: web.Request, path: str, *, content_type: bool = True
) -> dict[str, Any] | web.Response:
    """Content type (the OpenAI routes' ``validate_json_request`` dependency), JSON and the request model's
    field types, checked as sglang's FastAPI layer does; an OpenAI body comes back with numeric strings and
    the like coerced as pydantic would (a ``/generate`` one as sent: its API contract checks the raw JSON)."""
    if content_type:
        media = request.headers.get("Content-Type", "").lower().split(";", 1)[0].strip()
        if media != "application/json":
            unsupported = "Unsupported Media Type: Only 'application/json' is allowed"
            return validation_error([{"loc": ["header", "content-type"], "msg": unsupported, "type": "value_error"}])
    where = validation.endpoint(path, request.method)
    body = await read_json(request, where, path)
    if isinstance(body, web.Response):
        return body
    errors = validation.validate(path, body)
    if errors:
        return validation_error(errors, where)
    return body if path == validation.GENERATE_PATH else validation.coerce(path, body)


def crash(reason: str) -> None:
    """Die like a scheduler that hit an exception: a traceback-like report, then a non-zero exit."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(
        f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "repro_py/simengine/faults.py", line 1, in <simulated>\n'
        f"RuntimeError: SIMULATED fault {reason}\n"
        f"[{stamp}] Received sigquit from a child process. It usually means the child failed. (SIMULATED)\n"
    )
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)
