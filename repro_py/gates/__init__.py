"""Correctness gates run on the same server instance as the benchmark.

``run_gates(endpoint, expected, lossless_reference)`` runs the config echo,
the losslessness comparison (greedy, token for token), the sampled losslessness
check (in distribution, ``gates.sampled``) and the coding eval, and returns
``{"coding": {...}, "lossless": {...}, "sampled": {...}, "config_echo": {...}, "isolation": mode,
"passed": bool}``; ``which`` runs a part of them (a sweep runs the lossless gate in a restart of its
own, with deterministic inference, and the others on the production restart: ``sweep.lossless_restart``).
Without an isolating sandbox for the coding gate it raises
``repro_py.codeeval.sandbox.IsolationUnavailable`` before any request, unless
``allow_unisolated`` is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
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

__all__ = ["GATE_NAMES", "run_gates"]

GATE_NAMES = frozenset({"coding", "lossless", "sampled", "config_echo"})


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
    which: Collection[str] = GATE_NAMES,
) -> dict[str, Any]:
    """Run the gates named in ``which`` (default all four); ``passed`` is true only if each one run passed.

    ``lossless_reference`` is the baseline's reference as built by ``gates.lossless.make_reference``
    (or ``None``: the baseline's outputs then become the reference, found in
    ``result["lossless"]["output_ids"]``; a speculative config is not judged). Whether the server runs
    deterministic inference is read from its ``/server_info``. ``sampled_reference`` is the baseline's
    samples (``gates.sampled.make_reference``; ``None``: the baseline's samples are in
    ``result["sampled"]["samples"]``), ``sampled_samples`` the sampled gate's samples per prompt.
    """
    unknown = sorted(set(which) - GATE_NAMES)
    if unknown or not which:
        raise ValueError(f"gates {unknown or '(none)'}: allowed: {', '.join(sorted(GATE_NAMES))}")
    out: dict[str, Any] = {}
    if "coding" in which:  # refuse before a request
        out["isolation"] = await asyncio.to_thread(require_isolation, allow_unisolated=allow_unisolated)
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
        if "lossless" in which:
            out["lossless"] = await run_lossless(
                session, endpoint, lossless_reference, baseline=expected.algorithm == BASELINE,
                deterministic=deterministic, max_new_tokens=lossless_max_new_tokens,
            )  # fmt: skip
        if "sampled" in which:
            out["sampled"] = await run_sampled(
                session, endpoint, sampled_reference, baseline=expected.algorithm == BASELINE, samples=sampled_samples
            )
        if "coding" in which:
            out["coding"] = await run_coding(
                session, endpoint, problems, max_tokens=coding_max_tokens, min_pass_rate=min_coding_pass_rate,
                allow_unisolated=allow_unisolated,
            )
        if "config_echo" in which:
            out["config_echo"] = echo
    finally:
        if own:
            await session.close()
    out["passed"] = all(bool(out[name]["passed"]) for name in sorted(GATE_NAMES & set(which)))
    return out
