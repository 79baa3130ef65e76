"""Build a run's report from its result files: ``summary.md``, ``summary.csv``, ``plots/*.png``.

``python -m repro_py.report RUN_DIR`` rebuilds it (:mod:`repro_py.report.cli`; nothing reads the
engine: the files are the only input). Markdown comes from the Jinja2
template ``templates/report/summary.md.j2`` (linked as ``repro_py/report/templates``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from repro_py import sampling_settings
from repro_py.atomicio import write_text_atomic
from repro_py.report import plots, recommend, tables
from repro_py.results.lossless_mode import DETERMINISTIC_LABEL, FLAG
from repro_py.simmark import sim_note, speed_text

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"  # package data: an installed wheel has them
SUMMARY_TEMPLATE = "summary.md.j2"


def md_cell(value: object) -> str:
    """A value safe inside a Markdown table cell."""
    if value is None:
        return "-"
    text = str(value).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    return text.strip() or "-"


def fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def pct(value: object) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.1%}"


def short_hash(value: object) -> str:
    return "-" if not value else str(value)[:12]


def environment(template_dir: Path = TEMPLATE_DIR) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Markdown, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update({"md": md_cell, "fmt": fmt, "pct": pct, "short": short_hash})
    return env


def context(
    run: tables.Run, table: list[dict[str, Any]], winners: list[recommend.Winner], plot_paths: dict[str, Path]
) -> dict[str, Any]:
    plan = run.plan
    failed = [r for r in table if r["status"] != "ok"]
    engines = sorted({str((res.get("engine") or {}).get("version")) for res in run.results} - {"None", ""})
    speeds = run.sim_speeds
    fingerprints = [
        {"label": res.get("label"), "sampling": sampling_settings.of_result(res).text, **(res.get("fingerprint") or {})}
        for res in run.results
    ]
    return {
        "run_id": run.run_id,
        "simulated": run.simulated,
        "sim_speeds": [speed_text(v) for v in speeds],
        "sim_note": sim_note(speeds) if run.simulated else None,
        "mixed_speeds": run.mixed_speeds,
        "host": plan.get("host") or "-",
        "endpoint": plan.get("endpoint") or "-",
        "grid_source": plan.get("grid_source") or "-",
        "bench": plan.get("bench") or {},
        "state": run.state,
        "planned": len(plan.get("configs") or []),
        "finished": len(table),
        "ok": [r for r in table if r["status"] == "ok"],
        "failed": failed,
        "rows": table,
        "queued": [c for c in tables.cell_rows(run) if c["cell_status"] == "queued"],
        "winners": [w.as_dict() for w in winners],
        "winner_groups": _winner_groups(winners),
        "samplings": [s.text for s in run.samplings],
        "mixed_samplings": run.mixed_samplings,
        "sampled_gate": tables.sampled_gate_text(run),
        "plot_sets": [
            {
                "sampling": s.text,
                **{name: plot_paths[name + (s.label_suffix if run.mixed_samplings else "")].relative_to(run.path)
                   .as_posix() for name in plots.PLOTS},
            }
            for s in run.samplings
        ],
        "contexts": run.contexts,
        "concurrency": run.concurrency,
        "engine_versions": engines,
        "fingerprints": fingerprints,
        "plots": {name: path.relative_to(run.path).as_posix() for name, path in plot_paths.items()},
        "refused": run.refused,
        "figures_label": run.figures_label,
        "inference": inference_text(run),
        "lossless_mode": run.lossless_mode,
        "sandbox": plan.get("sandbox") or {},
        "sandboxes": sorted({r["sandbox"] for r in table} - {"-"}),
        "fleet": any(r["host"] for r in table),
        "fleet_classes": sorted({str(r["host_class"]) for r in table if r["host"] and r["host_class"]}),
        "fleet_hosts": sorted({str(r["host"]) for r in table if r["host"]}),
        "relaunched": [r for r in table if r["attempt_list"]],
        "missing": [
            item.get("label")
            for item in plan.get("configs") or []
            if isinstance(item, dict) and item.get("label") not in {r["label"] for r in table}
        ],
    }


def inference_text(run: tables.Run) -> str:
    """The header's words on what the figures were measured under and where the lossless gate ran."""
    block = run.plan.get("lossless_restart") or {}
    kind = run.figures_inference
    figures = {
        "deterministic": f"every figure under {DETERMINISTIC_LABEL}, not necessarily the production config",
        "production": "every figure from the config as deployed (no deterministic inference)",
        "mixed": f"MIXED: some figures under {DETERMINISTIC_LABEL}, some as deployed (each row says which)",
    }.get(kind, "not recorded")
    if run.lossless_mode is None:
        return f"{figures}; {FLAG}: not recorded (planned before it existed)"
    summary = str(block.get("summary") or "").removeprefix("lossless gate: ")
    return f"{figures}; {summary or FLAG + ' ' + run.lossless_mode}"


def _winner_groups(winners: list[recommend.Winner]) -> list[dict[str, Any]]:
    """The winners per sampling setting, in the order recommend() gave them."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for w in winners:
        groups.setdefault(w.sampling, []).append(w.as_dict())
    return [{"sampling": sampling, "winners": items} for sampling, items in groups.items()]


def build_report(run_path: Path, *, template_dir: Path = TEMPLATE_DIR) -> dict[str, Path]:
    """Write summary.md, summary.csv and plots/*.png under ``run_path``; return their paths."""
    run = tables.load_run(run_path)
    table = tables.rows(run)
    winners = recommend.recommend(table)
    plot_paths = plots.render_all(run, table, run_path / "plots")
    ctx = context(run, table, winners, plot_paths)
    text = environment(template_dir).get_template(SUMMARY_TEMPLATE).render(**ctx)
    summary_md = run_path / "summary.md"
    summary_csv = run_path / "summary.csv"
    write_text_atomic(summary_md, text)
    write_text_atomic(summary_csv, tables.to_csv(table))
    return {"summary_md": summary_md, "summary_csv": summary_csv, **plot_paths}
