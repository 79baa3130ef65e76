"""Losslessness gate: the speculative config must generate exactly what the baseline generates.

The oracle is the one sglang's own speculative-decoding parity test uses
(``sglang/test/kits/spec_server_kits.py``, ``SpecParityKit``): greedy outputs of
the speculative server equal those of a non-speculative server, token for token,
both run with ``--enable-deterministic-inference`` and the same attention
backend. Deterministic inference makes sglang's kernels batch invariant (fixed
reduction order and split sizes, the pytorch sampler, NCCL tree all-reduce
above one GPU), so a token no longer depends on what else was in the batch;
without it a correct DDTree can differ from the baseline in bf16 rounding and a
divergence proves nothing. So the gate judges only when both sides ran it
(read from each server's ``/server_info``, stored in the reference) and
otherwise says ``not_deterministic``: no tolerance is applied, because no bound
on bf16 batch nondeterminism could be stated that would keep a real
divergence (which, from its first token on, looks exactly like noise) apart.

Each fixed prompt (``lossless_prompts``: mixed lengths, and groups that share
part of a prefix, so the radix cache reuses and splits cached prefixes) goes
through ``POST /generate`` with ``sampling_params {temperature: 0,
max_new_tokens: N, ignore_eos: true}``: every output has exactly N tokens (an
output that stops early is a failure, never compared on its shorter length).
The prompts are sent ``concurrency`` at a time (default 16) and every prompt
``rounds`` times (default 2, more when there are few prompts), so requests
share decode batches and request rows are reused as earlier ones finish; every
repeat must equal the reference, and the repeats must equal each other.

Only the baseline (``algorithm: none``) makes a reference; a speculative config
with no baseline reference is not judged (``no_baseline``), and a reference
that did not come from a deterministic baseline is refused (``bad_reference``).
The server's log is scanned by the caller (``serverlog``). Verdicts: ``lossless``,
``reference`` (the baseline's outputs, repeats agreeing), ``diverged``,
``short_output``, ``generation_failed``, ``no_baseline``, ``bad_reference``,
``not_deterministic``, ``server_log``; ``passed`` only for the first two.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint
from repro_py.gates.lossless_prompts import PROMPTS

__all__ = ["PROMPTS", "compare", "make_reference", "reference_problem", "request_plan", "run_lossless"]

DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_CONCURRENCY = 16
DEFAULT_ROUNDS = 2
REFERENCE_SCHEMA = 2
BASELINE = "none"
PASSING = ("lossless", "reference")
ORACLE = (
    "exact token equality with the non-speculative baseline, both servers run with --enable-deterministic-inference "
    "(sglang's own spec parity test); ignore_eos with a fixed length"
)
NO_BASELINE = (
    "no baseline reference to compare with: a speculative config is judged only against the outputs of the "
    "non-speculative baseline (put {algorithm: none} in the grid: it runs first; or pass --reference FILE written "
    "by a baseline server with --write-reference)"
)
DETERMINISTIC_FIX = (
    "start both servers with --enable-deterministic-inference (role variable sglang_service_deterministic_inference:"
    " true; a sweep or tuner sets it on the restart that runs this gate, see --lossless-restart)"
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
    session: aiohttp.ClientSession, endpoint: Endpoint, text: str, *, max_new_tokens: int, timeout_s: float = 600.0,
    sampling: Mapping[str, Any] | None = None,
) -> list[int]:
    """One ``POST /generate``'s output ids: greedy, fixed-length (``ignore_eos``), or ``sampling`` as given."""
    params = dict(sampling) if sampling is not None else {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                          "ignore_eos": True}  # fmt: skip
    body = {"text": text, "sampling_params": params}
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


def make_reference(
    outputs: dict[str, list[int]], *, max_new_tokens: int, source: str, deterministic: bool,
    algorithm: str = BASELINE,
) -> dict[str, Any]:
    """A reference file's content: ``{"schema", "source", "algorithm", "deterministic", "ignore_eos",
    "max_new_tokens", "prompts": {id: text}, "outputs"}``."""
    return {
        "schema": REFERENCE_SCHEMA,
        "source": source,
        "algorithm": algorithm,
        "deterministic": deterministic,
        "ignore_eos": True,
        "max_new_tokens": max_new_tokens,
        "prompts": {pid: text for pid, text in PROMPTS if pid in outputs},
        "outputs": outputs,
    }


def reference_problem(reference: Mapping[str, Any]) -> str | None:
    """Why ``reference`` cannot be judged against, or None."""
    if reference.get("schema") != REFERENCE_SCHEMA:
        return (f"the reference has schema {reference.get('schema')!r}, not {REFERENCE_SCHEMA} (written before the "
                "oracle recorded its baseline and deterministic inference): write it again from the baseline")
    if reference.get("algorithm") != BASELINE:
        return (f"the reference came from a speculative server (algorithm {reference.get('algorithm')!r}), not from "
                "the baseline: a config compared with another speculative config proves nothing")
    if reference.get("ignore_eos") is not True or not isinstance(reference.get("outputs"), Mapping):
        return "the reference has no fixed-length (ignore_eos) outputs"
    return None


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


def _rows(
    prompts: tuple[tuple[str, str], ...], got: dict[str, list[list[int] | BaseException]],
    reference: Mapping[str, Any] | None, max_new_tokens: int,
) -> tuple[list[dict[str, Any]], dict[str, list[int]], list[str]]:
    """One row per prompt (every repeat compared with the reference, or with the first repeat), the first
    repeat's ids per prompt, and the generation errors."""
    outputs: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for pid, _ in prompts:
        failed = [r for r in got[pid] if isinstance(r, BaseException)]
        if failed:
            exc = failed[0]
            if not isinstance(exc, LosslessError | aiohttp.ClientError | TimeoutError):
                raise exc
            errors.append(f"{pid}: {exc}")
            rows.append({"id": pid, "exact": False, "first_divergence": None, "error": str(exc), "short": False,
                         "repeats": len(got[pid]), "failed_repeats": len(failed)})  # fmt: skip
            continue
        runs = [r for r in got[pid] if not isinstance(r, BaseException)]
        outputs[pid] = runs[0]
        expected = [int(t) for t in reference["outputs"][pid]] if reference is not None else runs[0]
        cmps = [compare(expected, ids) for ids in runs]
        bad = [c for c in cmps if not c.exact]
        rows.append({
            "id": pid, "observed_len": len(runs[0]), "error": None, "exact": not bad,
            "first_divergence": min((c.first_divergence for c in bad if c.first_divergence is not None), default=None),
            "short": any(len(ids) != max_new_tokens for ids in runs),
            "reference_len": len(expected), "repeats": len(runs), "diverging_repeats": len(bad),
        })  # fmt: skip
    return rows, outputs, errors


def _verdict(
    rows: list[dict[str, Any]], errors: list[str], *, reference: Mapping[str, Any] | None, baseline: bool,
    deterministic: bool | None, max_new_tokens: int, shape: str,
) -> tuple[str, str | None]:
    """(verdict, reason), the first that applies: what failed, what cannot be judged, then the comparison."""
    if errors:
        return "generation_failed", "generation failed: " + "; ".join(errors)
    if reference is None and not baseline:
        return "no_baseline", NO_BASELINE
    problem = reference_problem(reference) if reference is not None else None
    if problem is not None:
        return "bad_reference", problem
    short = [r["id"] for r in rows if r["short"]]
    if short:
        return "short_output", (f"{len(short)} prompts stopped before max_new_tokens={max_new_tokens} although "
                                f"ignore_eos was sent ({', '.join(short[:5])}): a fixed length is not guaranteed")
    bad = [r for r in rows if not r["exact"]]
    what = "diverge from the baseline reference" if reference is not None else "differ between their repeats"
    found = (f"{len(bad)} of {len(rows)} prompts {what}; first at token "
             f"{min(r['first_divergence'] for r in bad if r['first_divergence'] is not None)} ({shape})") if bad else ""
    sides = {"this server": deterministic,
             "the reference": True if reference is None else reference.get("deterministic")}
    missing = [side for side, on in sides.items() if on is not True]
    if missing:
        return "not_deterministic", (
            f"not judged: {' and '.join(missing)} did not run deterministic inference, so a divergence would prove "
            f"nothing ({found or 'outputs identical'}); {DETERMINISTIC_FIX}"
        )
    if bad:
        return "diverged", found
    if reference is None:
        return "reference", f"the baseline's outputs are the reference ({shape}, repeats agree)"
    return "lossless", None


async def run_lossless(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    reference: Mapping[str, Any] | None,
    *,
    baseline: bool,
    deterministic: bool | None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    prompts: tuple[tuple[str, str], ...] = PROMPTS,
    concurrency: int = DEFAULT_CONCURRENCY,
    rounds: int = DEFAULT_ROUNDS,
) -> dict[str, Any]:
    """Generate every fixed prompt ``rounds`` times, ``concurrency`` at a time, and compare each output with
    ``reference`` (``None``: the baseline makes the reference, its repeats must agree; a speculative server,
    ``baseline`` false, is then not judged). ``deterministic``: whether this server runs deterministic
    inference (``/server_info`` ``enable_deterministic_inference``; None: unknown).

    Returns ``{"passed", "verdict", "reason", "is_reference", "reference_source", "deterministic",
    "exact_match_rate", "first_divergence", "max_new_tokens", "ignore_eos", "oracle", "prompts": [...],
    "output_ids": {id: [...]}, "concurrency", "rounds", "requests", "peak_in_flight", "server_log"}``;
    a prompt row is exact only if all its repeats are. ``output_ids`` (the first repeat of each prompt)
    lets the caller store the baseline's reference (``make_reference``).
    """
    if concurrency < 1 or rounds < 1:
        raise ValueError(f"concurrency and rounds must be >= 1, got concurrency={concurrency}, rounds={rounds}")
    usable = reference is not None and reference_problem(reference) is None
    if reference is not None and usable:
        max_new_tokens = int(reference.get("max_new_tokens", max_new_tokens))
        ref_prompts = reference.get("prompts") or {}
        prompts = tuple((pid, str(ref_prompts.get(pid, text))) for pid, text in prompts if pid in reference["outputs"])
    plan = request_plan(prompts, rounds=rounds, concurrency=concurrency) if prompts else []
    results, peak = await _generate_all(session, endpoint, plan, max_new_tokens=max_new_tokens,
                                        concurrency=concurrency)  # fmt: skip
    got: dict[str, list[list[int] | BaseException]] = {}
    for (pid, _), result in zip(plan, results, strict=True):
        got.setdefault(pid, []).append(result)
    rows, outputs, errors = _rows(prompts, got, reference if usable else None, max_new_tokens)
    if not rows and not errors:
        errors.append("the reference holds none of the fixed prompts")
    shape = f"{len(plan)} requests, {concurrency} at a time (peak {peak} in flight)"
    verdict, reason = _verdict(rows, errors, reference=reference, baseline=baseline, deterministic=deterministic,
                               max_new_tokens=max_new_tokens, shape=shape)  # fmt: skip
    exact = sum(1 for r in rows if r["exact"])
    divergences = [r["first_divergence"] for r in rows if r.get("first_divergence") is not None]
    return {
        "passed": verdict in PASSING,
        "verdict": verdict,
        "reason": reason,
        "is_reference": verdict == "reference",
        "reference_source": None if reference is None else reference.get("source"),
        "deterministic": {"server": deterministic, "reference": None if reference is None else reference.get(
            "deterministic")},
        "exact_match_rate": exact / len(rows) if rows else None,
        "first_divergence": min(divergences) if divergences else None,
        "max_new_tokens": max_new_tokens,
        "ignore_eos": True,
        "oracle": ORACLE,
        "prompts": rows,
        "output_ids": outputs,
        "concurrency": concurrency,
        "rounds": rounds,
        "requests": len(plan),
        "peak_in_flight": peak,
        "server_log": {"scanned": False, "reason": "no server log was given to scan"},
    }
