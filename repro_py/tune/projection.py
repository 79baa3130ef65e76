"""A short rung's figure projected to the full rung's output length, per config, from its own timing.

A repeat of C concurrent requests with L output tokens each spans ``T0 + (L - 1) x t``: the time to the
first token ``T0`` (prefill, queueing: the repeat's median TTFT), then one output token every ``t``. Short
outputs spread ``T0`` over fewer tokens, so a screen reads low, and by how much depends on the config: one
that decodes fast loses more to the same ``T0`` (at concurrency 32, 64 against 256 output tokens cost
b8-t4 18% and the DFlash chain 11%). Comparing raw screen figures therefore favours the slow decoders. Each
repeat is projected instead with its own ``T0`` and ``t``::

    t = (span - T0) / (L - 1)        tok/s at L_full = C_ok x L_full / (T0 + (L_full - 1) x t)

where ``L_full`` is the full rung's ``max_tokens`` scaled by the share of its own ``max_tokens`` the
repeat produced. What the projection cannot see (an acceptance that changes as the sequence grows past
a draft window, a batch that thins out) stays in the projected figure; it is measured as the residual
against the full rung over the configs that reached both and added to the noise of every projected
figure (:meth:`repro_py.tune.noise.NoiseModel.observe_projection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from repro_py.tune.objectives import repeat_value, valid_repeats


def project_repeat(rep: Mapping[str, Any], rung_tokens: int, full_tokens: int) -> float | None:
    """One repeat's aggregate tok/s projected to ``full_tokens`` output tokens per request (None: the repeat
    lacks the timing to project: span, output tokens, requests, median TTFT)."""
    span, tokens, done = rep.get("wall_s"), rep.get("output_tokens"), rep.get("ok")
    ttft_ms = repeat_value(rep, "ttft_p50_ms")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (span, tokens, done)):
        return None
    assert isinstance(span, int | float) and isinstance(tokens, int | float) and isinstance(done, int | float)
    if ttft_ms is None or done <= 0 or span <= 0:
        return None
    per_request = tokens / done
    first = ttft_ms / 1000.0
    if per_request <= 1.0 or span <= first:
        return None
    per_token = (span - first) / (per_request - 1.0)
    target = full_tokens * per_request / rung_tokens
    return done * target / (first + (target - 1.0) * per_token)


def projected_values(cell: Mapping[str, Any] | None, rung_tokens: int, full_tokens: int) -> list[float] | None:
    """Every valid repeat's projected figure, or None when one of them cannot be projected."""
    out: list[float] = []
    for rep in valid_repeats(cell):
        value = project_repeat(rep, rung_tokens, full_tokens)
        if value is None:
            return None
        out.append(value)
    return out
