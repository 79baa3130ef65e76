"""The outcome of a tuning run as data: winners, the search path, settings (``tune/search.json``).

The report (Markdown), the plots and the console summary are made from this
one document, and it is rebuilt from the result files on ``--resume``.
"""

from __future__ import annotations

import math
from typing import Any

from repro_py.tune import verdict
from repro_py.tune.records import Record
from repro_py.tune.search import Search


def rung_view(search: Search, rec: Record) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for rung in rec.rungs:
        figures = {}
        for key in rung.tps:
            est = search.estimate(rec, rung.name, key)
            figures[key] = None if est is None else est.as_dict()
        out[rung.name] = {
            "figures": figures,
            "measured": {key: round(sum(v) / len(v), 2) for key, v in rung.measured_tps.items() if v},
            "accept": rung.accept,
            "step_ms": rung.step_ms,
            "decisions": rung.decisions,
            "cell_errors": rung.cell_errors,
        }
    return out


def latest_figures(search: Search, rec: Record) -> str:
    """Each objective's figure at the last rung that measured it."""
    parts = []
    for obj in search.settings.objectives:
        shown = f"{obj.key} -"
        for rung in reversed(rec.rungs):
            est = search.estimate(rec, rung.name, obj.key)
            if est is not None:
                shown = f"{obj.key} {est.text()} tok/s at {rung.name}"
                break
        parts.append(shown)
    return "; ".join(parts)


def outcome_text(rec: Record, search: Search) -> str:
    """How one config ended, in a few words."""
    if rec.status == "failed":
        return f"failed: {rec.failure}"
    drops = []
    for obj in search.settings.objectives:
        where = rec.dropped_at(obj.key)
        if where is not None:
            prefix = f"{obj.key}: " if len(search.settings.objectives) > 1 else ""
            drops.append(f"{prefix}dropped at {where[0]} ({where[1]})")
    gates = {"pass": "gated: pass", "FAIL": f"gated: FAIL ({rec.gates_reason})", "not run": "not gated"}.get(
        str(rec.gates), "-"
    )
    parts = [*drops, gates]
    if rec.slo_failures:
        parts.append("SLO not met: " + "; ".join(rec.slo_failures))
    return "; ".join(parts)


def predictions(search: Search) -> dict[str, list[dict[str, Any]]]:
    """The fitted surrogates' predictions for the unmeasured DDTree configs (for the plot)."""
    out: dict[str, list[dict[str, Any]]] = {}
    pool = [c for c in search.space.configs if c.label not in search.records and c.spec.algorithm == "ddtree"]
    for key, surrogate in search.surrogates.items():
        if not surrogate.fitted or not pool:
            continue
        mu, sd = surrogate.predict([c.spec for c in pool])
        out[key] = [
            {"label": c.label, "budget": c.spec.budget, "mean": round(math.exp(m), 2), "log_sd": round(float(v), 4)}
            for c, m, v in zip(pool, mu, sd, strict=True)
        ]
    return out


def versus_current(search: Search) -> list[dict[str, Any]]:
    """Each winner against the inventory's current config (:func:`repro_py.tune.verdict.versus_current`)."""
    out = []
    for won in verdict.winners(search):
        versus = verdict.versus_current(search, won)
        if versus is not None:
            out.append(versus.as_dict())
    return out


def noise_document(search: Search) -> dict[str, Any]:
    """The noise the run measured: pooled CV per repeat per rung, between restarts, of the projections."""
    final = search.settings.final.name
    projection: dict[str, dict[str, dict[str, float | int]]] = {}
    for rung in search.settings.ladder:
        if rung.name == final:
            continue
        projection[rung.name] = {}
        for o in search.settings.objectives:
            bias, variance, configs = search.noise.projection(rung.name, o.key)
            projection[rung.name][o.key] = {
                "mean_residual": round(bias, 4),
                "cv": round(math.sqrt(variance), 4),
                "configs": configs,
            }
    return {
        "within": {
            rung.name: {o.key: round(search.noise.rel_sd(rung.name, o.key), 4) for o in search.settings.objectives}
            for rung in search.settings.ladder
        },
        "between_restarts": {**search.noise.between().as_dict(), "text": search.noise.between().text()},
        "projection": projection,
    }


def search_document(search: Search, *, stop_reason: str, settings: dict[str, Any], restarts: int) -> dict[str, Any]:
    records = sorted(search.records.values(), key=lambda r: r.order)
    return {
        "schema": 1,
        "settings": settings,
        "stop_reason": stop_reason,
        "restarts": restarts,
        "configs_measured": len(records),
        "space_size": len(search.space),
        "winners": [w.as_dict() for w in verdict.winners(search)],
        "noise": noise_document(search),
        "surrogates": {key: s.describe() for key, s in search.surrogates.items()},
        "predictions": predictions(search),
        "versus": versus_current(search),
        "path": [
            {
                "order": rec.order,
                "label": rec.label,
                "config": rec.cfg.short(),
                "proposal": rec.proposal,
                "rungs": rung_view(search, rec),
                "last_rung": rec.last_rung,
                "status": rec.status,
                "failure": rec.failure,
                "gates": rec.gates,
                "gates_reason": rec.gates_reason,
                "slo_failures": rec.slo_failures,
                "outcome": outcome_text(rec, search),
                "wall_s": rec.wall_s,
            }
            for rec in records
        ],
    }
