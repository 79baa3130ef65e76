"""What a DDTree server refuses: per request (HTTP 400) and at startup, as the patch series' server does.

Mirrors ``ddtree_request_refusal`` of patch 0010
(``patches/sglang/0.5.23/0010-refuse-what-tree-verification-cannot-serve-per.patch``).
A DDTree server serves greedy and sampled requests alike (sampled ones verified
with target-only tree sampling, lossless in distribution) but refuses what
depends on the path generated so far, which differs per tree node: grammar
constraints, thinking budgets, custom logit processors, path-dependent
penalties (frequency, presence, repetition, min_new_tokens) and watermarking,
with the patch's messages, in the patch's order; the server keeps serving.

Like the patch, it judges the request's *normalized* ``SamplingParams``
(``sampling.SamplingParams.build``, after ``normalize`` and ``verify``: the
tokenizer manager refuses a DDTree request only once sglang's own checks have
passed); values are printed as the request gave them.

At startup (``startup_refusal``), acceptance thresholds other than 1.0 are
refused for DDTree: any other value accepts drafted tokens the target would not
have sampled, so sampled requests would no longer be lossless.
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
    return None


def startup_refusal(threshold_single: float, threshold_acc: float) -> str | None:
    """Why a DDTree server refuses to start with these acceptance thresholds, or None (both 1.0)."""
    if float(threshold_single) == 1.0 and float(threshold_acc) == 1.0:
        return None
    return (
        f"--speculative-accept-threshold-single {threshold_single} / --speculative-accept-threshold-acc "
        f"{threshold_acc}: DDTree (--speculative-ddtree-budget) allows only 1.0 for both: any other value "
        "accepts drafted tokens the target would not have sampled, so sampled requests would not be lossless. "
        "Leave both at 1.0, or serve plain DFLASH (without --speculative-ddtree-budget)."
    )
