"""Correctness gates run on the same server instance as the benchmark.

``run_gates(endpoint, expected, lossless_reference)`` runs the config echo,
the losslessness comparison (greedy, token for token), the sampled losslessness
check (in distribution, ``gates.sampled``) and the coding eval, and returns
``{"coding": {...}, "lossless": {...}, "sampled": {...}, "config_echo": {...}, "isolation": mode,
"passed": bool}``.
Without an isolating sandbox for the coding gate it raises
``repro_py.codeeval.sandbox.IsolationUnavailable`` before any request, unless
``allow_unisolated`` is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp

from repro_py.bench.server_info import ServerInfoError, fetch_server_info
from repro_py.codeeval.problems import Problem
from repro_py.codeeval.sandbox import require_isolation
from repro_py.endpoint import Endpoint
from repro_py.gates.coding import DEFAULT_MAX_TOKENS, DEFAULT_MIN_PASS_RATE, run_coding
from repro_py.gates.echo import echo_result
from repro_py.gates.lossless import BASELINE, DEFAULT_MAX_NEW_TOKENS, run_lossless
from repro_py.gates.sampled import DEFAULT_SAMPLES, run_sampled
from repro_py.spec_config import SpecConfig

__all__ = ["run_gates"]


async def run_gates(
    endpoint: Endpoint,
    expected: SpecConfig,
    lossless_reference: Mapping[str, Any] | None,
    *,
    coding_max_tokens: int = DEFAULT_MAX_TOKENS,
    min_coding_pass_rate: float = DEFAULT_MIN_PASS_RATE,
    lossless_max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    problems: list[Problem] | None = None,
    session: aiohttp.ClientSession | None = None,
    allow_unisolated: bool = False,
    sampled_reference: Mapping[str, Any] | None = None,
    sampled_samples: int = DEFAULT_SAMPLES,
) -> dict[str, Any]:
    """Run all four gates; ``passed`` is true only if each one passed.

    ``lossless_reference`` is the baseline's reference as built by ``gates.lossless.make_reference``
    (or ``None``: the baseline's outputs then become the reference, found in
    ``result["lossless"]["output_ids"]``; a speculative config is not judged). Whether the server runs
    deterministic inference is read from its ``/server_info``. ``sampled_reference`` is the baseline's
    samples (``gates.sampled.make_reference``; ``None``: the baseline's samples are in
    ``result["sampled"]["samples"]``), ``sampled_samples`` the sampled gate's samples per prompt.
    """
    mode = await asyncio.to_thread(require_isolation, allow_unisolated=allow_unisolated)  # refuse before a request
    own = session is None
    if session is None:
        session = aiohttp.ClientSession()
    try:
        deterministic: bool | None = None
        try:
            info = await fetch_server_info(session, endpoint)
            echo = echo_result(info, expected)
            deterministic = info.raw.get("enable_deterministic_inference") is True
        except ServerInfoError as exc:
            echo = {"passed": False, "expected": expected.as_short(), "reported": None, "mismatches": [],
                    "reason": str(exc)}
        lossless = await run_lossless(
            session, endpoint, lossless_reference, baseline=expected.algorithm == BASELINE, deterministic=deterministic,
            max_new_tokens=lossless_max_new_tokens,
        )
        sampled = await run_sampled(
            session, endpoint, sampled_reference, baseline=expected.algorithm == BASELINE, samples=sampled_samples
        )
        coding = await run_coding(
            session, endpoint, problems, max_tokens=coding_max_tokens, min_pass_rate=min_coding_pass_rate,
            allow_unisolated=allow_unisolated,
        )
    finally:
        if own:
            await session.close()
    return {
        "coding": coding,
        "lossless": lossless,
        "sampled": sampled,
        "config_echo": echo,
        "isolation": mode,
        "passed": bool(coding["passed"] and lossless["passed"] and sampled["passed"] and echo["passed"]),
    }
