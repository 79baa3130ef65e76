"""What the sweep measures against a ready engine: server info, benchmark, gates.

:class:`Measure` is the interface the sweep loop uses; :class:`BundleMeasure`
implements it with :mod:`repro_py.bench` (``run_matrix``) and
:mod:`repro_py.gates` (``run_gates``). Tests inject lighter ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import Any, Protocol

import aiohttp

from repro_py import gates as gates_mod
from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.bench.server_info import fetch_server_info
from repro_py.codeeval.sandbox import isolation_in_force, require_isolation
from repro_py.endpoint import Endpoint
from repro_py.gates import GATE_NAMES
from repro_py.gates.lossless import make_reference
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig


class Measure(Protocol):
    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        """The ``engine`` block: kind, version, sim_speed, max_total_num_tokens, deterministic_inference (raises on
        failure)."""
        ...

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        """``repro_py.bench`` result: ``{"cells": [...], "settings": {...}, ...}``."""
        ...

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        """``{"coding", "lossless", "config_echo", "passed", ...}`` (the gates named in ``which``; ``passed`` over
        those); with ``reference`` None the lossless gate has nothing to compare to: the baseline's result then
        carries ``lossless_reference`` (its outputs, when they may be one) for later configs; a speculative config
        is not judged. Asked for the lossless gate alone, the decision to gate was taken already."""
        ...

    async def alive(self, endpoint: Endpoint) -> bool:
        """Whether the engine still answers (cheap: ``/ready``, then ``/health``)."""
        ...


async def engine_alive(endpoint: Endpoint, *, timeout_s: float = 3.0) -> bool:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for path in ("/ready", "/health"):
            try:
                async with session.get(endpoint.url(path), headers=endpoint.headers()) as resp:
                    if resp.status == 200:
                        return True
                    if resp.status != 404:
                        return False
            except (aiohttp.ClientError, TimeoutError, OSError):
                return False
    return False


def coding_sandbox(*, allow_unisolated: bool) -> dict[str, Any]:
    """The coding gate's sandbox, checked before anything restarts: ``{"mode", "description",
    "unisolated_allowed"}``; raises ``IsolationUnavailable`` (naming what is missing) when no isolating
    mode works here and ``allow_unisolated`` is false."""
    mode = require_isolation(allow_unisolated=allow_unisolated)
    return {"mode": mode, "description": isolation_in_force(mode), "unisolated_allowed": allow_unisolated}


def _engine_block(summary: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """``deterministic_inference``: whether the engine that gives the figures runs sglang's deterministic
    inference (its ``/server_info`` ``enable_deterministic_inference``; None when it does not say)."""
    flag = raw.get("enable_deterministic_inference")
    return {
        "kind": summary.get("kind"),
        "version": summary.get("version"),
        "sim_speed": summary.get("sim_speed"),
        "max_total_num_tokens": summary.get("max_total_num_tokens"),
        "deterministic_inference": flag if isinstance(flag, bool) else None,
    }


class BundleMeasure:
    """The bundle's own benchmark and gates."""

    def __init__(self, *, gates_kwargs: Mapping[str, Any] | None = None) -> None:
        self.gates_kwargs = dict(gates_kwargs or {})

    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        async with aiohttp.ClientSession() as session:
            info = await fetch_server_info(session, endpoint)
        return _engine_block(info.engine_summary(), info.raw)

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        settings = BenchSettings(
            contexts=bench.contexts, concurrency=bench.concurrency, repeats=bench.repeats, max_tokens=bench.max_tokens,
            temperature=cfg.sampling.temperature, top_p=cfg.sampling.top_p,
        )  # fmt: skip
        result: dict[str, Any] = await run_matrix(endpoint, settings)
        return result

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        run_gates: Any = gates_mod.run_gates
        call = run_gates(endpoint, cfg.spec, reference, which=which, **self.gates_kwargs)
        result: dict[str, Any] = await call if inspect.isawaitable(call) else call
        lossless = result.get("lossless") or {}
        made = lossless.get("verdict") == "reference" and isinstance(lossless.get("output_ids"), dict)
        if reference is None and made:
            result["lossless_reference"] = make_reference(  # the baseline's outputs (lossless gives no other verdict)
                lossless["output_ids"], max_new_tokens=int(lossless.get("max_new_tokens") or 0), source=cfg.label,
                deterministic=(lossless.get("deterministic") or {}).get("server") is True,
            )
        return result

    async def alive(self, endpoint: Endpoint) -> bool:
        return await engine_alive(endpoint)
