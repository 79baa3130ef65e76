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


async def read_json(request: web.Request) -> dict[str, Any] | web.Response:
    """The JSON object body, or FastAPI's 400 for a body that is not JSON (``json_invalid``)."""
    raw = await request.read()
    try:
        body = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        pos = exc.pos if isinstance(exc, json.JSONDecodeError) else 0
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return validation_error(
            [{"type": "json_invalid", "loc": ("body", pos), "msg": "JSON decode error", "input": {},
              "ctx": {"error": msg}}]
        )
    if not isinstance(body, dict):
        return validation_error(
            [{"type": "model_attributes_type", "loc": ("body",),
              "msg": "Input should be a valid dictionary or object to extract fields from", "input": body}]
        )
    return body


def validation_error(errors: list[dict[str, Any]]) -> web.Response:
    """sglang's answer to a refused request body: 400 ``ErrorResponse``, type ``Bad Request``."""
    return json_response(validation.error_body(errors), 400)


async def validated_body(request: web.Request, path: str) -> dict[str, Any] | web.Response:
    """Content type, JSON and the request model's field types checked as sglang's FastAPI layer does;
    the body comes back with numeric strings and the like coerced as pydantic would."""
    media = request.headers.get("Content-Type", "").lower().split(";", 1)[0].strip()
    if media != "application/json":
        return validation_error(
            [{"loc": ["header", "content-type"], "msg": "Unsupported Media Type: Only 'application/json' is allowed",
              "type": "value_error"}]
        )
    body = await read_json(request)
    if isinstance(body, web.Response):
        return body
    errors = validation.validate(path, body)
    if errors:
        return validation_error(errors)
    return validation.coerce(path, body)


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
