"""Small HTTP helpers shared by the engine's handlers, and the crash of a faulted engine."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from aiohttp import web


class BadRequest(Exception):
    """A request sglang would refuse with 400."""


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> web.Response:
    return json_response(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status}, status
    )


async def read_json(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError) as exc:
        return openai_error(f"Invalid JSON body: {exc}")
    if not isinstance(body, dict):
        return openai_error("The JSON body must be an object")
    return body


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
