"""``results/<run>/tune/report.md`` and ``tune/search.json``: winners, margins, the search path, plots.

Rendered from the search document (:mod:`repro_py.tune.outcome`) with the
report package's Jinja2 environment (the same Markdown filters) and the
template ``templates/tune/report.md.j2`` (linked as ``repro_py/tune/templates``). The sweep's own report of the same
result files (``summary.md``, ``summary.csv``, ``plots/``) is built next to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repro_py import sampling_settings
from repro_py.atomicio import write_json_atomic, write_text_atomic
from repro_py.report.fleet import offset_text
from repro_py.report.render import environment, inference_text
from repro_py.report.tables import load_run
from repro_py.simmark import sim_note
from repro_py.tune import plots

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"  # package data: an installed wheel has them
TEMPLATE = "report.md.j2"


def _est_text(est: dict[str, Any] | None) -> str:
    if not est:
        return "-"
    return f"{est['mean']:.1f} ({est['low']:.1f}..{est['high']:.1f})"


def _cells(entry: dict[str, Any], ladder: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rung in ladder:
        body = entry["rungs"].get(rung["name"])
        if not body:
            out[rung["name"]] = "-"
            continue
        shown = []
        for key, est in body["figures"].items():
            accept = body["accept"].get(key)
            text = "-" if est is None else f"{est['mean']:.1f}"
            measured = (body.get("measured") or {}).get(key)
            if measured is not None:
                text += f" [measured {measured:.1f}]"
            if accept:
                text += f" (acc {accept:.2f})"
            shown.append(text if len(body["figures"]) == 1 else f"{key} {text}")
        shown += [f"{key}: no measurement" for key in body["cell_errors"]]
        out[rung["name"]] = "; ".join(shown) or "-"
    return out


def context(doc: dict[str, Any], run_path: Path, plot_paths: dict[str, Path]) -> dict[str, Any]:
    run = load_run(run_path)
    settings = doc["settings"]
    ladder = settings["ladder"]
    winners = []
    for w in doc["winners"]:
        winners.append(
            {
                **w,
                "value_text": _est_text(w.get("estimate")),
                "runner_up_text": _est_text(w.get("runner_up_estimate")) if w.get("runner_up_estimate") else "",
            }
        )
    path = [{**entry, "cells": _cells(entry, ladder)} for entry in doc["path"]]
    budget = settings.get("budget") or {}
    if budget.get("max_restarts") is not None:
        budget_text = f"budget {budget['max_restarts']} restarts, the final restore included"
    elif budget.get("max_hours") is not None:
        budget_text = f"budget {budget['max_hours']:g} h"
    else:
        budget_text = "no budget"
    last = ladder[-1]["name"]
    sandbox = run.plan.get("sandbox") or {}
    modes = sorted({str(((r.get("gates") or {}).get("coding") or {}).get("isolation_mode")) for r in run.results
                    if ((r.get("gates") or {}).get("coding") or {}).get("isolation_mode")})
    return {
        "figures_label": run.figures_label,
        "inference": inference_text(run),
        "restarts_per_config": int((run.plan.get("lossless_restart") or {}).get("restarts_per_config") or 1),
        "sandbox": sandbox,
        "sandboxes": modes,
        "run_id": run.run_id,
        "simulated": run.simulated,
        "sim_note": sim_note(run.sim_speeds) if run.simulated else None,
        "host": ", ".join(settings.get("hosts") or []) or settings.get("host") or "-",
        "fleet": _fleet_rows(run_path),
        "sampling": sampling_settings.of_result(settings).text,
        "objectives": settings["objectives"],
        "slos": settings.get("slos") or [],
        "space_size": doc["space_size"],
        "space_source": settings["space"]["source"],
        "capped": settings["space"].get("left_out_topk_above_budget") or 0,
        "ladder": ladder,
        "confidence": settings["noise"]["confidence"],
        "between": doc["noise"]["between_restarts"]["text"],
        "noise_full": doc["noise"]["within"].get(last, {}),
        "projection": doc["noise"]["projection"],
        "restarts": doc["restarts"],
        "budget_text": budget_text,
        "measured": doc["configs_measured"],
        "gated": sum(1 for p in doc["path"] if p["gates"] in ("pass", "FAIL")),
        "screened_out": sum(1 for p in doc["path"] if p["gates"] == "not run"),
        "failed": sum(1 for p in doc["path"] if p["status"] == "failed" and p["gates"] != "FAIL"),
        "stop_reason": doc["stop_reason"],
        "winners": winners,
        "versus": doc.get("versus") or [],
        "path": path,
        "plots": {name: p.relative_to(run_path / "tune").as_posix() for name, p in plot_paths.items()},
    }


def _fleet_rows(run_path: Path) -> dict[str, Any] | None:
    """A run on several hosts (``tune/fleet.json``): per host its status, offset, restarts and restore."""
    try:
        fleet = json.loads((run_path / "tune" / "fleet.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = []
    for name, host in sorted((fleet.get("hosts") or {}).items()):
        offset = host.get("offset") or {}
        restore = host.get("restore") or {}
        rows.append({
            "host": name, "status": host.get("status"), "cause": host.get("cause") or "",
            "offset": offset_text(offset) if offset else "not measured",
            "restarts": host.get("restarts"), "spent": host.get("spent_restarts") or 0,
            "configs": len(host.get("configs") or []),
            "restore": restore.get("status") or "-", "restore_reason": restore.get("reason") or "",
        })  # fmt: skip
    return {"class": fleet.get("class"), "offset_limit": fleet.get("offset_limit"), "rows": rows}


def write_report(doc: dict[str, Any], run_path: Path, *, template_dir: Path = TEMPLATE_DIR) -> dict[str, Path]:
    """Write tune/search.json, tune/plots/*.png and tune/report.md; return their paths."""
    tune_dir = run_path / "tune"
    search_json = tune_dir / "search.json"
    write_json_atomic(search_json, doc)
    plot_paths = plots.render_all(doc, run_path, tune_dir / "plots")
    text = environment(template_dir).get_template(TEMPLATE).render(**context(doc, run_path, plot_paths))
    report_md = tune_dir / "report.md"
    write_text_atomic(report_md, text)
    return {"report_md": report_md, "search_json": search_json, **plot_paths}
