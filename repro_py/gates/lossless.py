"""Losslessness gate: fixed prompts at temperature 0, compared token for token.

Speculative decoding must not change what the target model would have
generated. Each fixed prompt goes through ``POST /generate`` with
``sampling_params {temperature: 0, max_new_tokens: N}`` and its ``output_ids``
are compared with a reference (the baseline, or the first config of a run).
Any difference fails the gate; the first diverging position is reported, so a
garbled tree mask shows up at once as an early divergence.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint

DEFAULT_MAX_NEW_TOKENS = 128
REFERENCE_SCHEMA = 1
PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "The capital city of France is"),
    ("sort", "Write a Python function that sorts a list of integers using merge sort, and explain each step."),
    ("story", "Once upon a time, in a village at the edge of a great forest, there lived a clockmaker who"),
    ("math", "Compute 17 * 23 step by step, showing every intermediate product and sum."),
    ("list", "List the first twenty prime numbers, one per line, each followed by its square."),
    ("json", 'Return a JSON object describing a book with the keys "title", "author", "year" and "tags".'),
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


async def run_lossless(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    reference: dict[str, Any] | None,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    prompts: tuple[tuple[str, str], ...] = PROMPTS,
) -> dict[str, Any]:
    """Generate every fixed prompt and compare with ``reference`` (``None``: this run becomes the reference).

    Returns ``{"passed", "is_reference", "exact_match_rate", "first_divergence", "max_new_tokens",
    "prompts": [...], "output_ids": {id: [...]}, "reason"}``; ``output_ids`` lets the caller store a
    reference for later configs (``make_reference``).
    """
    if reference is not None:
        max_new_tokens = int(reference.get("max_new_tokens", max_new_tokens))
        ref_prompts = reference.get("prompts") or {}
        prompts = tuple((pid, text) for pid, text in prompts if pid in (reference.get("outputs") or {}))
        prompts = tuple((pid, str(ref_prompts.get(pid, text))) for pid, text in prompts)
        if not prompts:
            return {
                "passed": False, "is_reference": False, "exact_match_rate": None, "first_divergence": None,
                "max_new_tokens": max_new_tokens, "prompts": [], "output_ids": {},
                "reason": "the reference holds none of the fixed prompts",
            }
    outputs: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for pid, text in prompts:
        try:
            ids = await generate_ids(session, endpoint, text, max_new_tokens=max_new_tokens)
        except (LosslessError, aiohttp.ClientError, TimeoutError) as exc:
            errors.append(f"{pid}: {exc}")
            rows.append({"id": pid, "exact": False, "first_divergence": None, "error": str(exc)})
            continue
        outputs[pid] = ids
        row: dict[str, Any] = {"id": pid, "observed_len": len(ids), "error": None}
        if reference is not None:
            cmp = compare([int(t) for t in reference["outputs"][pid]], ids)
            row.update(exact=cmp.exact, first_divergence=cmp.first_divergence, reference_len=cmp.reference_len)
        else:
            row.update(exact=True, first_divergence=None, reference_len=len(ids))
        rows.append(row)
    exact = sum(1 for r in rows if r["exact"])
    divergences = [r["first_divergence"] for r in rows if r.get("first_divergence") is not None]
    passed = not errors and exact == len(rows)
    if errors:
        reason: str | None = "generation failed: " + "; ".join(errors)
    elif not passed:
        bad = [r for r in rows if not r["exact"]]
        reason = f"{len(bad)} of {len(rows)} prompts diverge from the reference; first at token {min(divergences)}"
    else:
        reason = None if reference is not None else "no reference given: this config's outputs are the reference"
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
    }
