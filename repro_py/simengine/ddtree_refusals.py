"""What a DDTree server refuses per request, as the patch series' server does (HTTP 400).

Mirrors ``ddtree_request_refusal`` of patch 0010
(``patches/sglang/0.5.23/0010-refuse-what-tree-verification-cannot-serve-per.patch``):
tree verification keeps a draft only where it equals the target's greedy choice,
so a DDTree server serves plain greedy decoding only. Grammar constraints,
thinking budgets, custom logit processors, path-dependent penalties,
watermarking and sampling are refused with the same messages, in the same
order, and the server keeps serving.

Like the patch, it judges the request's *normalized* ``SamplingParams``
(``sampling.SamplingParams.build``, after ``normalize`` and ``verify``: the
tokenizer manager refuses a DDTree request only once sglang's own checks have
passed): greedy is top_k 1 (a temperature below 1e-6 became top_k 1), a request
that names no temperature has sglang's default of 1.0 and top_k -1 became the
whole vocabulary (1 << 30), printed as the -1 the client sent, and other values
are printed as the request gave them.
"""

from __future__ import annotations

from typing import Any

SERVE_WITHOUT = (
    "send it to a server started without --speculative-ddtree-budget (plain DFLASH or no speculative decoding)"
)
_GRAMMAR_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")


def refusal(sp: Any, *, custom_logit_processor: str | None = None) -> str | None:
    """Why a DDTree server refuses a request with these normalized sampling parameters, or None."""
    grammar = [name for name in _GRAMMAR_KEYS if getattr(sp, name, None) is not None]
    if grammar:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve grammar-constrained "
            f"requests ({', '.join(grammar)}; response_format is served as one): "
            "tree nodes are verified without the grammar's token mask. " + SERVE_WITHOUT + "."
        )
    custom = getattr(sp, "custom_params", None)
    if isinstance(custom, dict) and custom.get("thinking_budget") is not None:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve a thinking budget "
            "(max_thinking_tokens / custom_params.thinking_budget): it is enforced "
            "by a grammar that tree verification does not apply. " + SERVE_WITHOUT + "."
        )
    if custom_logit_processor:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve requests with a "
            "custom logit processor: it may depend on the generated path, which "
            "differs per tree node. " + SERVE_WITHOUT + "."
        )
    penalties: list[str] = []
    if float(getattr(sp, "frequency_penalty", 0.0) or 0.0) != 0.0:
        penalties.append(f"frequency_penalty={sp.frequency_penalty}")
    if float(getattr(sp, "presence_penalty", 0.0) or 0.0) != 0.0:
        penalties.append(f"presence_penalty={sp.presence_penalty}")
    if float(getattr(sp, "repetition_penalty", 1.0) or 1.0) != 1.0:
        penalties.append(f"repetition_penalty={sp.repetition_penalty}")
    if int(getattr(sp, "min_new_tokens", 0) or 0) > 0:
        penalties.append(f"min_new_tokens={sp.min_new_tokens}")
    if getattr(sp, "watermark", None) is not None:
        penalties.append("watermark")
    if penalties:
        return (
            "DDTree (--speculative-ddtree-budget) cannot serve "
            f"{', '.join(penalties)}: they depend on the tokens generated so far, "
            "which differ per tree node (allowed: frequency_penalty 0, "
            "presence_penalty 0, repetition_penalty 1, min_new_tokens 0, no "
            "watermark). " + SERVE_WITHOUT + "."
        )
    top_k = int(getattr(sp, "top_k", 1))
    temperature = getattr(sp, "temperature", None)
    # normalize turned temperature 0 into top_k 1 and top_k -1 into the whole vocabulary (1 << 30)
    greedy = top_k == 1 or (temperature is not None and 0.0 <= float(temperature) < 1e-6)
    if not greedy:
        shown = "-1" if top_k in (-1, 1 << 30) else str(top_k)  # what the client sent, as the patch prints it
        return (
            "DDTree (--speculative-ddtree-budget) serves greedy decoding only "
            f"(temperature 0, or top_k 1); got temperature={temperature}, top_k={shown}. Tree "
            "verification keeps a draft only where it equals the target's argmax, "
            "so sampling would be decoded greedily without telling you. Send "
            "temperature 0, or " + SERVE_WITHOUT + "."
        )
    return None
