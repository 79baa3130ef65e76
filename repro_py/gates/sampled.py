"""Sampled losslessness gate: the config under test samples from the same distribution as the baseline.

A speculative server verifying sampled requests (temperature > 0) is lossless in distribution, not
token for token: two samples differ, but for a fixed prompt and sampling parameters the generated
tokens must follow the same distribution as plain autoregressive sampling from the target. The
gate checks exactly that, without deterministic inference (a distributional test needs none):

* each fixed prompt (``PROMPTS``, a subset of the greedy gate's) is sent ``samples`` times through
  ``POST /generate`` with ``sampling_params {temperature, top_p, max_new_tokens: tokens,
  ignore_eos: true}`` and no seed (independent draws), ``concurrency`` at a time;
* the baseline (``algorithm: none``) makes the reference: its samples, stored by the caller
  (``make_reference``); a speculative config's samples are compared with it by the stratified
  permutation test of ``distribution`` on the first ``tokens`` tokens (every prefix length and
  every position);
* it fails (``distribution_differs``) when ``p <= alpha``. The false-alarm rate of a correct
  server is at most ``alpha`` per config (``FALSE_ALARM_RATE``; exact, by the permutation
  argument), so over a sweep of M configs at most ``M * alpha``.

The first generated token comes from the prefill, never from a verify step; it is compared all
the same (the prefix of length 1) and costs nothing in validity.

Verdicts: ``reference`` (the baseline made one), ``same_distribution``, ``distribution_differs``,
``generation_failed``, ``short_output``, ``no_baseline``, ``bad_reference``; ``passed`` only for
the first two.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint
from repro_py.gates.distribution import Outcome, same_distribution
from repro_py.gates.lossless import LosslessError, generate_ids
from repro_py.gates.lossless_prompts import PROMPTS as GREEDY_PROMPTS

__all__ = ["PROMPTS", "make_reference", "reference_problem", "run_sampled"]

DEFAULT_TEMPERATURE = 1.0  # what the OpenAI client's default request gets (sglang's default)
DEFAULT_TOP_P = 0.9  # top-p exercised too (it is applied to the verify logits)
DEFAULT_TOKENS = 6
DEFAULT_SAMPLES = 150  # per prompt and side
DEFAULT_CONCURRENCY = 64
ALPHA = 0.001
FALSE_ALARM_RATE = ALPHA
PERMUTATIONS = 1999  # p-values in steps of 1/2000: alpha = 2/2000
REFERENCE_SCHEMA = 1
BASELINE = "none"
PASSING = ("reference", "same_distribution")
_IDS = ("capital", "story", "color", "haiku", "define", "hi", "math", "recipe")
PROMPTS: tuple[tuple[str, str], ...] = tuple(p for p in GREEDY_PROMPTS if p[0] in _IDS)
ORACLE = (
    "the distribution of the first tokens of independent sampled generations equals the baseline's (a stratified "
    "permutation test on every prefix length; no deterministic inference needed)"
)
NO_BASELINE = (
    "no baseline samples to compare with: a speculative config is judged only against the non-speculative "
    "baseline's samples at the same setting (put {algorithm: none} in the grid: it runs first)"
)


def _setting(temperature: float, top_p: float, tokens: int) -> dict[str, Any]:
    return {"temperature": temperature, "top_p": top_p, "max_new_tokens": tokens, "ignore_eos": True}


async def _sample_all(
    session: aiohttp.ClientSession, endpoint: Endpoint, prompts: tuple[tuple[str, str], ...], *, samples: int,
    params: dict[str, Any], concurrency: int,
) -> tuple[dict[str, list[list[int]]], list[str]]:
    """Every prompt ``samples`` times (interleaved), ``concurrency`` at a time: the samples and the errors."""
    gate = asyncio.Semaphore(concurrency)

    async def one(text: str) -> list[int]:
        async with gate:
            return await generate_ids(session, endpoint, text, max_new_tokens=params["max_new_tokens"], sampling=params)

    plan = [p for _ in range(samples) for p in prompts]
    results = await asyncio.gather(*(one(text) for _, text in plan), return_exceptions=True)
    got: dict[str, list[list[int]]] = {pid: [] for pid, _ in prompts}
    errors: list[str] = []
    for (pid, _), result in zip(plan, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, LosslessError | aiohttp.ClientError | TimeoutError):
                raise result
            errors.append(f"{pid}: {result}")
        else:
            got[pid].append(result)
    return got, errors


def make_reference(result: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """A reference file's content from the baseline's result (verdict ``reference``)."""
    return {
        "schema": REFERENCE_SCHEMA,
        "source": source,
        "algorithm": BASELINE,
        "setting": dict(result["setting"]),
        "prompts": {pid: text for pid, text in PROMPTS if pid in result["samples"]},
        "samples": result["samples"],
    }


def reference_problem(reference: Mapping[str, Any], setting: Mapping[str, Any]) -> str | None:
    """Why ``reference`` cannot be judged against at ``setting``, or None."""
    if reference.get("schema") != REFERENCE_SCHEMA:
        return f"the sampled reference has schema {reference.get('schema')!r}, not {REFERENCE_SCHEMA}"
    if reference.get("algorithm") != BASELINE:
        return (f"the sampled reference came from a speculative server (algorithm {reference.get('algorithm')!r}), "
                "not from the baseline")
    if dict(reference.get("setting") or {}) != dict(setting):
        return (f"the sampled reference was taken at {reference.get('setting')}, this gate samples at "
                f"{dict(setting)}: distributions at two settings are not comparable")
    if not isinstance(reference.get("samples"), Mapping) or not reference["samples"]:
        return "the sampled reference holds no samples"
    return None


def _judged(outcome: Outcome, shape: str) -> tuple[str, str | None]:
    detail = f"p={outcome.p_value:.4g}, alpha={outcome.alpha} ({outcome.tables} tables, {shape})"
    if not outcome.differs:
        return "same_distribution", None
    worst = outcome.worst
    where = ""
    if worst is not None:
        what = "the pooled rare ones" if worst.prefix is None else f"{list(worst.prefix)}"
        which = f"token {worst.length}" if worst.position_only else f"first {worst.length} tokens"
        where = (f"; most moved: prompt {worst.prompt!r}, {which} {what}: {worst.tested_count} here vs "
                 f"{worst.baseline_count} in the baseline")
    return "distribution_differs", f"the sampled tokens' distribution differs from the baseline's: {detail}{where}"


async def run_sampled(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    reference: Mapping[str, Any] | None,
    *,
    baseline: bool,
    samples: int = DEFAULT_SAMPLES,
    tokens: int = DEFAULT_TOKENS,
    temperature: float = DEFAULT_TEMPERATURE,
    top_p: float = DEFAULT_TOP_P,
    concurrency: int = DEFAULT_CONCURRENCY,
    prompts: tuple[tuple[str, str], ...] = PROMPTS,
) -> dict[str, Any]:
    """Sample every prompt ``samples`` times and judge against ``reference`` (the baseline's samples; None: the
    baseline makes them, a speculative server is not judged).

    Returns ``{"passed", "verdict", "reason", "oracle", "setting", "samples_per_prompt", "prompts", "requests",
    "concurrency", "p_value", "alpha", "false_alarm_rate", "permutations", "statistic", "reference_source"}``, plus
    ``"samples"`` (every prompt's token ids) when the verdict is ``reference``.
    """
    if samples < 1 or tokens < 1 or concurrency < 1 or not temperature > 0.0:
        raise ValueError(f"samples={samples}, tokens={tokens}, concurrency={concurrency} must be >= 1 and "
                         f"temperature={temperature} > 0")
    setting = _setting(temperature, top_p, tokens)
    problem = reference_problem(reference, setting) if reference is not None else None
    got, errors = await _sample_all(session, endpoint, prompts, samples=samples, params=setting,
                                    concurrency=concurrency)  # fmt: skip
    shape = f"{samples} samples of {len(prompts)} prompts, {concurrency} at a time"
    short = sorted(pid for pid, runs in got.items() if any(len(ids) != tokens for ids in runs))
    outcome: Outcome | None = None
    reason: str | None
    if errors:
        verdict, reason = "generation_failed", f"{len(errors)} generations failed; first: {errors[0]}"
    elif short:
        verdict, reason = "short_output", (f"prompts {', '.join(short)} stopped before max_new_tokens={tokens} "
                                           "although ignore_eos was sent")
    elif reference is None:
        verdict, reason = ("reference", f"the baseline's samples are the reference ({shape})") if baseline else (
            "no_baseline", NO_BASELINE)
    elif problem is not None:
        verdict, reason = "bad_reference", problem
    else:
        outcome = await asyncio.to_thread(
            same_distribution, reference["samples"], got, tokens=tokens, alpha=ALPHA, permutations=PERMUTATIONS
        )
        verdict, reason = _judged(outcome, shape)
    result: dict[str, Any] = {
        "passed": verdict in PASSING,
        "verdict": verdict,
        "reason": reason,
        "oracle": ORACLE,
        "setting": setting,
        "samples_per_prompt": samples,
        "prompts": [pid for pid, _ in prompts],
        "requests": samples * len(prompts),
        "concurrency": concurrency,
        "p_value": None if outcome is None else outcome.p_value,
        "statistic": None if outcome is None else round(outcome.statistic, 3),
        "alpha": ALPHA,
        "false_alarm_rate": FALSE_ALARM_RATE,
        "permutations": PERMUTATIONS,
        "reference_source": None if reference is None else reference.get("source"),
    }
    if verdict == "reference":
        result["samples"] = got
    return result
