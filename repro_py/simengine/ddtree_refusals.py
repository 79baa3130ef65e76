"""What a DDTree server refuses per request, as the patch series' server does (HTTP 400).

Mirrors ``ddtree_request_refusal`` of patch 0010
(``patches/sglang/0.5.23/0010-refuse-what-tree-verification-cannot-serve-per.patch``):
tree verification keeps a draft only where it equals the target's greedy choice,
so a DDTree server serves plain greedy decoding only. Grammar constraints,
thinking budgets, custom logit processors, path-dependent penalties and
sampling are refused with the same messages, in the same order, the server
keeps serving. Sampling is judged after sglang's own normalisation: a
temperature below 1e-6 means greedy (top_k 1), and a request that names no
temperature gets sglang's default of 1.0, so it is refused too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SERVE_WITHOUT = (
    "send it to a server started without --speculative-ddtree-budget (plain DFLASH or no speculative decoding)"
)
#: sglang's SamplingParams treats a temperature below this as greedy (top_k = 1).
SAMPLING_EPS = 1e-6
#: sglang's default temperature when a request names none (protocol.py, SamplingParams).
DEFAULT_TEMPERATURE = 1.0
_GRAMMAR_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")


def _number(value: object, default: float) -> float:
    if value is None or isinstance(value, bool):
        return default
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _grammar(sampling: Mapping[str, Any]) -> list[str]:
    names = [name for name in _GRAMMAR_KEYS if sampling.get(name) is not None]
    fmt = sampling.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") in {"json_schema", "json_object"} and "json_schema" not in names:
        names.append("json_schema")
    return names


def refusal(sampling: Mapping[str, Any]) -> str | None:
    """Why a DDTree server refuses a request with these sampling settings, or None.

    ``sampling`` holds the request's sampling fields under sglang's names (a chat or
    completions body, or /generate's ``sampling_params``); ``min_tokens`` (the OpenAI
    name) counts as ``min_new_tokens``.
    """
    grammar = _grammar(sampling)
    if grammar:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve grammar-constrained "
            f"requests ({', '.join(grammar)}; response_format is served as one): "
            "tree nodes are verified without the grammar's token mask. " + SERVE_WITHOUT + "."
        )
    custom = sampling.get("custom_params")
    if isinstance(custom, Mapping) and custom.get("thinking_budget") is not None:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve a thinking budget "
            "(max_thinking_tokens / custom_params.thinking_budget): it is enforced "
            "by a grammar that tree verification does not apply. " + SERVE_WITHOUT + "."
        )
    if sampling.get("custom_logit_processor"):
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve requests with a "
            "custom logit processor: it may depend on the generated path, which "
            "differs per tree node. " + SERVE_WITHOUT + "."
        )
    penalties: list[str] = []
    for name, neutral in (("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0)):
        value = _number(sampling.get(name), neutral)
        if value != neutral:
            penalties.append(f"{name}={value}")
    min_new = _number(sampling.get("min_new_tokens", sampling.get("min_tokens")), 0.0)
    if min_new > 0:
        penalties.append(f"min_new_tokens={int(min_new)}")
    if penalties:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve "
            f"{', '.join(penalties)}: they depend on the tokens generated so far, "
            "which differ per tree node (allowed: frequency_penalty 0, "
            "presence_penalty 0, repetition_penalty 1, min_new_tokens 0, no "
            "watermark). " + SERVE_WITHOUT + "."
        )
    temperature = _number(sampling.get("temperature"), DEFAULT_TEMPERATURE)
    top_k = int(_number(sampling.get("top_k"), -1))
    if temperature < SAMPLING_EPS:
        top_k = 1
    if top_k != 1:
        return (
            "DDTree (--speculative-ddtree-budget) serves greedy decoding only "
            f"(temperature 0, or top_k 1); got temperature={temperature}, top_k={top_k}. Tree "
            "verification keeps a draft only where it equals the target's argmax, "
            "so sampling would be decoded greedily without telling you. Send "
            "temperature 0, or " + SERVE_WITHOUT + "."
        )
    return None
