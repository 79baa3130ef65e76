"""The host a fleet sweep measured a result on, and what that does to the result's figures.

A fleet sweep's result carries ``host`` (``name``, ``class``, ``offset``, ``offset_uncertainty``) and
``attempts`` (the earlier measurements of the config that did not count: its host was lost). A host's
offset is how much faster (+) or slower (-) it ran the reference config than its class's median, as a
fraction; the figures the report ranks (single-stream, aggregate, long-context tok/s) are divided by
``1 + offset`` and their CVs widened by the offset's uncertainty in quadrature (``sqrt(cv**2 + u**2)``),
so configs measured on two hosts of one class compare as if measured on one. The figures as measured stay
in the row as ``*_raw``. A result with no host (a one-host sweep) or whose host has no offset keeps its
figures as measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: the ranked figures and their CVs, as :func:`repro_py.report.tables.row` names them
RANKED: tuple[tuple[str, str], ...] = (
    ("single_stream_tps", "single_stream_cv"),
    ("aggregate_tps", "aggregate_cv"),
    ("long_context_tps", "long_context_cv"),
)
#: the CSV columns of a fleet run's results (after the one-host columns; a one-host run's CSV has none of them)
FLEET_CSV_COLUMNS: tuple[str, ...] = (
    "host",
    "host_class",
    "host_offset",
    "host_offset_uncertainty",
    "host_corrected",
    "attempts",
    "single_stream_tps_raw",
    "single_stream_cv_raw",
    "aggregate_tps_raw",
    "aggregate_cv_raw",
    "long_context_tps_raw",
    "long_context_cv_raw",
)


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def host_of(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The result's ``host`` block (None for a one-host sweep's result)."""
    host = result.get("host")
    return host if isinstance(host, Mapping) else None


def offset_of(result: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """The host's offset and its uncertainty; the offset is None when it cannot correct (absent, not a number,
    or at or below -100%)."""
    host = host_of(result) or {}
    offset = _num(host.get("offset"))
    if offset is None or 1.0 + offset <= 0.0:
        return None, None
    return offset, _num(host.get("offset_uncertainty"))


def correct(result: Mapping[str, Any], value: float | None) -> float | None:
    """A tok/s figure of ``result`` divided by ``1 + offset`` of its host (as measured when there is none)."""
    offset, _ = offset_of(result)
    return value if value is None or offset is None else value / (1.0 + offset)


def widen(cv: float | None, uncertainty: float | None) -> float | None:
    """A CV widened by the offset's uncertainty in quadrature."""
    return cv if cv is None or uncertainty is None else math.sqrt(cv * cv + uncertainty * uncertainty)


def attempts_of(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The earlier measurements of the config that did not count, in order: host, cause, failure class, when."""
    out = []
    for item in result.get("attempts") or []:
        if not isinstance(item, Mapping):
            continue
        failure = item.get("failure") if isinstance(item.get("failure"), Mapping) else {}
        out.append({
            "host": item.get("host"),
            "cause": item.get("cause"),
            "failure_class": (failure or {}).get("class"),
            "at": item.get("at"),
        })
    return out


def signed_pct(value: float) -> str:
    return f"{value:+.1%}"


def host_text(result: Mapping[str, Any]) -> str | None:
    """``sglang-fleet-2 (offset +3.1% ± 1.2%)``; ``... (no offset: figures as measured)``; None without a host."""
    host = host_of(result)
    if host is None:
        return None
    offset, uncertainty = offset_of(result)
    name = str(host.get("name") or "?")
    if offset is None:
        return f"{name} (no offset: figures as measured)"
    spread = "" if uncertainty is None else f" ± {uncertainty:.1%}"
    return f"{name} (offset {signed_pct(offset)}{spread})"


def fields(result: Mapping[str, Any], figures: Mapping[str, float | None]) -> dict[str, Any]:
    """The row's ranked figures and CVs (``figures``, as measured) corrected by the host's offset, the figures as
    measured (``*_raw``), and the host's keys: for a result without a host the figures unchanged, no host, 0
    attempts."""
    host = host_of(result) or {}
    offset, uncertainty = offset_of(result)
    out: dict[str, Any] = {
        "host": host.get("name"),
        "host_class": host.get("class"),
        "host_offset": offset,
        "host_offset_uncertainty": uncertainty,
        "host_corrected": offset is not None,
        "host_text": host_text(result),
        "attempts": len(attempts_of(result)),
        "attempt_list": attempts_of(result),
    }
    for tps, cv in RANKED:
        out[f"{tps}_raw"] = figures.get(tps)
        out[f"{cv}_raw"] = figures.get(cv)
        out[tps] = correct(result, figures.get(tps))
        out[cv] = widen(figures.get(cv), uncertainty) if offset is not None else figures.get(cv)
    return out
