"""Whether the server a repeat measured is still the one it started with, answering.

A repeat's failed requests count against the error budget only when they came
from a server that stayed up: after any failed request (or unreadable
counters) the server is probed (``GET /v1/models``) and its identity read
again (``/server_info``). A server that does not answer, that restarted (its
identity changed: sglang 0.5.23's ``startup_time`` holds the durations this
process measured while starting, which a new process measures anew; the
simulated engine also reports its pid), or whose requests lost their
connection fails the repeat whatever the budget, and a gone or restarted one
ends the matrix.
"""

from __future__ import annotations

import dataclasses
import json

import aiohttp

from repro_py.bench.client import RequestResult
from repro_py.bench.counters import CounterSnapshot
from repro_py.bench.server_info import ServerInfoError, fetch_server_info
from repro_py.endpoint import Endpoint


@dataclasses.dataclass(frozen=True)
class Trouble:
    """Why a repeat cannot count whatever the error budget, and whether the server is gone (the cell ends)."""

    reason: str
    gone: bool


async def probe_server(session: aiohttp.ClientSession, endpoint: Endpoint, *, timeout_s: float = 10.0) -> str | None:
    """``None`` when the server still answers HTTP (``GET /v1/models``), else why not."""
    try:
        async with session.get(
            endpoint.url("/v1/models"), headers=endpoint.headers(), timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            await resp.read()
            return None if resp.status < 500 else f"GET /v1/models returned HTTP {resp.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return f"GET /v1/models failed: {type(exc).__name__}: {exc}"


async def server_identity(session: aiohttp.ClientSession, endpoint: Endpoint) -> str | None:
    """What tells this server process from the next one (None when it cannot be read)."""
    try:
        info = await fetch_server_info(session, endpoint)
    except (ServerInfoError, aiohttp.ClientError, TimeoutError, OSError):
        return None
    sim = info.raw.get("sim")
    parts = {"startup_time": info.raw.get("startup_time"), "pid": sim.get("pid") if isinstance(sim, dict) else None}
    if all(v is None for v in parts.values()):
        return None
    return json.dumps(parts, sort_keys=True, default=str)


async def repeat_trouble(
    session: aiohttp.ClientSession, endpoint: Endpoint, results: list[RequestResult], before: CounterSnapshot,
    after: CounterSnapshot, *, identity: str | None,
) -> Trouble | None:
    """Why this repeat fails whatever the error budget (see the module), or None."""
    if all(r.ok for r in results) and (before.error is not None or after.error is None):
        return None
    why_not = await probe_server(session, endpoint)
    if why_not is not None:
        return Trouble(f"the server stopped answering: {why_not}", gone=True)
    now = await server_identity(session, endpoint)
    if identity is not None and now is not None and now != identity:
        return Trouble("the server restarted during the repeat (its /server_info startup_time or pid changed)", True)
    cut = [r for r in results if r.lost]
    if cut:
        return Trouble(f"{len(cut)} requests lost their connection: the server stopped answering during the repeat "
                       f"(first: {cut[0].error})", gone=False)  # fmt: skip
    if before.error is None and after.error is not None:
        return Trouble(f"/metrics stopped answering during the repeat: {after.error}", gone=False)
    return None
