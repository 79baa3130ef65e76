"""Ctrl-C handling for an asyncio run: one handler installed on the running loop for a body's duration."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar

_T = TypeVar("_T")


async def with_sigint(handler: Callable[[], None], body: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``body`` with ``handler`` on SIGINT, where the event loop can install one (not on every platform or
    thread); the loop's previous handling comes back afterwards."""
    loop = asyncio.get_running_loop()
    installed = False
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        loop.add_signal_handler(signal.SIGINT, handler)
        installed = True
    try:
        return await body()
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
