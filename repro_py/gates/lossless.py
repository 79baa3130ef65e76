"""Losslessness gate: fixed prompts at temperature 0, sent concurrently, compared token for token.

Speculative decoding must not change what the target model would have
generated. Each fixed prompt goes through ``POST /generate`` with
``sampling_params {temperature: 0, max_new_tokens: N}`` and its ``output_ids``
are compared with a reference (the baseline, or the first config of a run).
Any difference fails the gate; the first diverging position is reported, so a
garbled tree mask shows up at once as an early divergence.

The prompts (mixed lengths) are sent ``concurrency`` at a time (default 16)
and every prompt ``rounds`` times (default 2, more when there are few
prompts), so requests share decode batches and request rows are reused as
earlier ones finish. A fault that corrupts one request only while others
decode beside it (one request's KV window overrunning into another's) is
invisible to one request at a time; here every repeat of every prompt must
equal the reference, and the repeats must equal each other.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint

DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_CONCURRENCY = 16
DEFAULT_ROUNDS = 2
REFERENCE_SCHEMA = 1
PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "The capital city of France is"),
    ("sort", "Write a Python function that sorts a list of integers using merge sort, and explain each step."),
    ("story", "Once upon a time, in a village at the edge of a great forest, there lived a clockmaker who"),
    ("math", "Compute 17 * 23 step by step, showing every intermediate product and sum."),
    ("list", "List the first twenty prime numbers, one per line, each followed by its square."),
    ("json", 'Return a JSON object describing a book with the keys "title", "author", "year" and "tags".'),
    ("hi", "Hi"),
    ("color", "Name a color."),
    ("haiku", "Write a haiku about autumn rain."),
    ("define", "Define entropy in one sentence."),
    ("translate", "Translate into German: The train leaves at seven in the morning and arrives before noon."),
    ("sql", "Write an SQL query that returns the ten customers with the highest total order value in 2024."),
    ("regex", "Explain what the regular expression ^[A-Z][a-z]+(?: [A-Z][a-z]+)*$ matches, with three examples."),
    ("recipe", "Give a recipe for a simple tomato soup: ingredients with quantities first, then numbered steps."),
    ("compare", "Compare TCP and UDP in a table with rows for ordering, reliability, overhead and typical uses."),
    ("bug", "Find the bug: def mean(xs): return sum(xs) / len(xs) - 1. Explain it and give a corrected version."),
    ("letter", (
        "Write a short, polite letter to a landlord asking for the heating to be repaired. Mention that it "
        "stopped working three days ago, that the temperature inside has dropped below sixteen degrees, and "
        "that you are available on weekday mornings for a technician to visit."
    )),
    ("summary", (
        "Summarize the following in two sentences. The committee met on Tuesday to review the annual budget. "
        "After a long discussion about maintenance costs, members agreed to postpone the new library wing by "
        "one year and to spend the savings on repairing the roof of the existing building, which has leaked "
        "during every heavy storm since last winter. A public meeting will present the plan next month."
    )),
    ("proof", "Prove that the square root of 2 is irrational, step by step."),
    ("plan", (
        "I have three days in Rome in early spring, I like history and food, and I do not want to spend more "
        "than two hours a day in museums. Make a day-by-day plan with morning, afternoon and evening."
    )),
    ("code_review", (
        "Review this function and suggest improvements:\n\n"
        "def load(path):\n    f = open(path)\n    data = f.read()\n    items = []\n"
        "    for line in data.split('\\n'):\n        if line != '':\n            items.append(line.strip())\n"
        "    return items\n"
    )),
    ("numbers", "Count from one to thirty in words, separated by commas."),
    ("physics", "Why is the sky blue? Answer for a ten-year-old, then for a physics student."),
    ("dialog", (
        "Continue this dialogue for six more lines.\nA: Did you lock the door?\nB: I thought you did.\n"
        "A: I was carrying the bags.\nB:"
    )),
)


class LosslessError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Comparison:
    exact: bool
    first_divergence: int | None  # index of the first differing token; None if identical
    reference_len: int
    observed_len: int


def compare(reference: list[int], observed: list[int]) -> Comparison:
    """Token-for-token comparison. A length difference diverges at the shorter length."""
    first: int | None = None
    for i, (a, b) in enumerate(zip(reference, observed, strict=False)):
        if a != b:
            first = i
            break
    if first is None and len(reference) != len(observed):
        first = min(len(reference), len(observed))
    return Comparison(first is None, first, len(reference), len(observed))


async def generate_ids(
    session: aiohttp.ClientSession, endpoint: Endpoint, text: str, *, max_new_tokens: int, timeout_s: float = 600.0
) -> list[int]:
    body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}
    async with session.post(
        endpoint.url("/generate"), json=body, headers=endpoint.headers(),
        timeout=aiohttp.ClientTimeout(total=timeout_s),
    ) as resp:
        if resp.status != 200:
            raise LosslessError(f"POST /generate returned HTTP {resp.status}: {(await resp.text())[:300]!r}")
        reply: Any = await resp.json(content_type=None)
    ids = reply.get("output_ids") if isinstance(reply, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise LosslessError("POST /generate reply has no output_ids list")
    return [int(t) for t in ids]


def make_reference(outputs: dict[str, list[int]], *, max_new_tokens: int, source: str) -> dict[str, Any]:
    """A reference file's content: ``{"schema", "source", "max_new_tokens", "prompts": {id: text}, "outputs"}``."""
    return {
        "schema": REFERENCE_SCHEMA,
        "source": source,
        "max_new_tokens": max_new_tokens,
        "prompts": {pid: text for pid, text in PROMPTS if pid in outputs},
        "outputs": outputs,
    }


@dataclasses.dataclass
class _InFlight:
    now: int = 0
    peak: int = 0


def request_plan(prompts: tuple[tuple[str, str], ...], *, rounds: int, concurrency: int) -> list[tuple[str, str]]:
    """Every prompt ``rounds`` times, in passes (p0..pn, p0..pn, ...), with at least
    two batches' worth of requests so rows are reused even with few prompts."""
    if not prompts:
        return []
    passes = max(rounds, -(-2 * concurrency // len(prompts)))
    return [p for _ in range(passes) for p in prompts]


async def _generate_all(
    session: aiohttp.ClientSession, endpoint: Endpoint, plan: list[tuple[str, str]], *, max_new_tokens: int,
    concurrency: int,
) -> tuple[list[list[int] | BaseException], int]:
    """Send the plan ``concurrency`` requests at a time; return each result (ids or the error) and the
    most requests that were in flight at once."""
    gate = asyncio.Semaphore(concurrency)
    flight = _InFlight()

    async def one(text: str) -> list[int]:
        async with gate:
            flight.now += 1
            flight.peak = max(flight.peak, flight.now)
            try:
                return await generate_ids(session, endpoint, text, max_new_tokens=max_new_tokens)
            finally:
                flight.now -= 1

    results = await asyncio.gather(*(one(text) for _, text in plan), return_exceptions=True)
    return list(results), flight.peak


async def run_lossless(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    reference: dict[str, Any] | None,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    prompts: tuple[tuple[str, str], ...] = PROMPTS,
    concurrency: int = DEFAULT_CONCURRENCY,
    rounds: int = DEFAULT_ROUNDS,
) -> dict[str, Any]:
    """Generate every fixed prompt ``rounds`` times, ``concurrency`` at a time, and compare each output
    with ``reference`` (``None``: this run becomes the reference; its repeats must still agree).

    Returns ``{"passed", "is_reference", "exact_match_rate", "first_divergence", "max_new_tokens",
    "prompts": [...], "output_ids": {id: [...]}, "reason", "concurrency", "rounds", "requests",
    "peak_in_flight"}``; a prompt row is exact only if all its repeats are. ``output_ids`` (the first
    repeat of each prompt) lets the caller store a reference for later configs (``make_reference``).
    """
    if concurrency < 1 or rounds < 1:
        raise ValueError(f"concurrency and rounds must be >= 1, got concurrency={concurrency}, rounds={rounds}")
    if reference is not None:
        max_new_tokens = int(reference.get("max_new_tokens", max_new_tokens))
        ref_prompts = reference.get("prompts") or {}
        prompts = tuple((pid, text) for pid, text in prompts if pid in (reference.get("outputs") or {}))
        prompts = tuple((pid, str(ref_prompts.get(pid, text))) for pid, text in prompts)
        if not prompts:
            return {
                "passed": False, "is_reference": False, "exact_match_rate": None, "first_divergence": None,
                "max_new_tokens": max_new_tokens, "prompts": [], "output_ids": {},
                "reason": "the reference holds none of the fixed prompts", "concurrency": concurrency,
                "rounds": rounds, "requests": 0, "peak_in_flight": 0,
            }
    plan = request_plan(prompts, rounds=rounds, concurrency=concurrency)
    results, peak = await _generate_all(session, endpoint, plan, max_new_tokens=max_new_tokens,
                                        concurrency=concurrency)  # fmt: skip
    by_prompt: dict[str, list[list[int] | BaseException]] = {}
    for (pid, _), result in zip(plan, results, strict=True):
        by_prompt.setdefault(pid, []).append(result)
    outputs: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for pid, _ in prompts:
        got = by_prompt[pid]
        failed = [r for r in got if isinstance(r, BaseException)]
        if failed:
            exc = failed[0]
            if not isinstance(exc, LosslessError | aiohttp.ClientError | TimeoutError):
                raise exc
            errors.append(f"{pid}: {exc}")
            rows.append({"id": pid, "exact": False, "first_divergence": None, "error": str(exc),
                         "repeats": len(got), "failed_repeats": len(failed)})  # fmt: skip
            continue
        runs = [r for r in got if not isinstance(r, BaseException)]
        outputs[pid] = runs[0]
        expected = [int(t) for t in reference["outputs"][pid]] if reference is not None else runs[0]
        cmps = [compare(expected, ids) for ids in runs]
        bad = [c for c in cmps if not c.exact]
        first = min((c.first_divergence for c in bad if c.first_divergence is not None), default=None)
        rows.append({
            "id": pid, "observed_len": len(runs[0]), "error": None, "exact": not bad, "first_divergence": first,
            "reference_len": len(expected), "repeats": len(runs), "diverging_repeats": len(bad),
        })  # fmt: skip
    exact = sum(1 for r in rows if r["exact"])
    divergences = [r["first_divergence"] for r in rows if r.get("first_divergence") is not None]
    passed = not errors and exact == len(rows)
    shape = f"{len(plan)} requests, {concurrency} at a time (peak {peak} in flight)"
    if errors:
        reason: str | None = "generation failed: " + "; ".join(errors)
    elif not passed:
        bad_rows = [r for r in rows if not r["exact"]]
        what = "diverge from the reference" if reference is not None else "differ between their repeats"
        reason = (
            f"{len(bad_rows)} of {len(rows)} prompts {what}; first at token {min(divergences)} ({shape})"
        )
    else:
        reason = None if reference is not None else (
            f"no reference given: this config's outputs are the reference ({shape}, repeats agree)"
        )
    return {
        "passed": passed,
        "is_reference": reference is None,
        "reference_source": None if reference is None else reference.get("source"),
        "exact_match_rate": exact / len(rows) if rows else None,
        "first_divergence": min(divergences) if divergences else None,
        "max_new_tokens": max_new_tokens,
        "prompts": rows,
        "output_ids": outputs,
        "reason": reason,
        "concurrency": concurrency,
        "rounds": rounds,
        "requests": len(plan),
        "peak_in_flight": peak,
    }
