"""Coding-correctness gate: the project's own problems with hidden unit tests.

Each problem's prompt is sent as the last user message (temperature 0,
``max_tokens`` 1024 by default, as in the field). The code is the last fenced
block of the FINAL answer (never a draft from the reasoning); it runs in the
sandbox against the hidden tests and every answer gets one class: pass,
wrong_answer, exception, timeout, truncated or no_code.

The gate judges only in an isolating sandbox mode (bubblewrap or namespaces):
without one it raises ``IsolationUnavailable`` before the first request, naming
what is missing, unless ``allow_unisolated`` is given. The mode that judged is
in the result (``isolation_mode``, with ``isolation`` describing it).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp

from repro_py.codeeval.problems import Problem, load_problems
from repro_py.codeeval.runner import VERDICTS, judge
from repro_py.codeeval.sandbox import SandboxLimits, isolation_in_force, require_isolation
from repro_py.endpoint import Endpoint

DEFAULT_MAX_TOKENS = 1024
DEFAULT_MIN_PASS_RATE = 0.8
SYSTEM_PROMPT = (
    "Complete the Python function below. Give the complete function, with its signature, "
    "in a single ```python fenced code block at the end of your answer."
)


async def ask(
    session: aiohttp.ClientSession, endpoint: Endpoint, problem: Problem, *, max_tokens: int, timeout_s: float
) -> dict[str, Any]:
    """One non-streaming chat completion; returns content, reasoning, finish_reason, usage or an error."""
    body = {
        "model": endpoint.model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem.prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": False,
    }
    try:
        async with session.post(
            endpoint.url("/v1/chat/completions"), json=body, headers=endpoint.headers(),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                return {"error": f"HTTP {resp.status}: {(await resp.text())[:300]}"}
            reply: Any = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        choice = reply["choices"][0]
        message = choice.get("message") or {}
        return {
            "error": None,
            "content": message.get("content"),
            "reasoning": message.get("reasoning_content"),
            "finish_reason": choice.get("finish_reason"),
            "completion_tokens": (reply.get("usage") or {}).get("completion_tokens"),
        }
    except (KeyError, IndexError, TypeError, AttributeError):
        return {"error": f"malformed chat completion: {str(reply)[:300]}"}


async def run_coding(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    problems: list[Problem] | None = None,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    min_pass_rate: float = DEFAULT_MIN_PASS_RATE,
    limits: SandboxLimits | None = None,
    concurrency: int = 4,
    timeout_s: float = 900.0,
    allow_unisolated: bool = False,
) -> dict[str, Any]:
    """Ask every problem, judge every answer; ``passed`` iff pass rate >= ``min_pass_rate`` and no request failed.

    Raises ``IsolationUnavailable`` (before any request) when no isolating sandbox works here and
    ``allow_unisolated`` is false."""
    mode = await asyncio.to_thread(require_isolation, allow_unisolated=allow_unisolated)
    problems = problems if problems is not None else load_problems()
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: Problem) -> dict[str, Any]:
        async with gate:
            answer = await ask(session, endpoint, problem, max_tokens=max_tokens, timeout_s=timeout_s)
        if answer["error"] is not None:
            return {"id": problem.id, "verdict": "error", "detail": answer["error"], "finish_reason": None}
        judgement = await asyncio.to_thread(
            judge, problem, content=answer["content"], reasoning=answer["reasoning"],
            finish_reason=answer["finish_reason"], limits=limits, isolation=mode,
        )
        row: dict[str, Any] = {"id": problem.id, **judgement.as_dict()}
        row["completion_tokens"] = answer["completion_tokens"]
        return row

    rows = await asyncio.gather(*(one(p) for p in problems))
    counts = Counter(str(r["verdict"]) for r in rows)
    total = len(rows)
    passes = counts.get("pass", 0)
    rate = passes / total if total else 0.0
    errors = counts.get("error", 0)
    passed = errors == 0 and total > 0 and rate >= min_pass_rate
    reason: str | None = None
    if errors:
        reason = f"{errors} of {total} requests failed"
    elif not passed:
        failing = ", ".join(f"{r['id']}={r['verdict']}" for r in rows if r["verdict"] != "pass")
        reason = f"{passes}/{total} passed, below the required {min_pass_rate:.0%}: {failing}"
    return {
        "passed": passed,
        "pass_count": passes,
        "total": total,
        "pass_rate": rate,
        "min_pass_rate": min_pass_rate,
        "max_tokens": max_tokens,
        "counts": {v: counts.get(v, 0) for v in (*VERDICTS, "error")},
        "isolation_mode": mode,
        "isolation": isolation_in_force(mode),
        "unisolated_allowed": allow_unisolated,
        "problems": list(rows),
        "reason": reason,
    }
