"""The tuner's plots (matplotlib, Agg), marked SIMULATED with the sim speed as every report plot is.

``search.png``     per objective: each restarted config's figure at the rung where it stopped (marker by
                   fate: dropped at the screen, dropped later, gated, failed), and the winner so far
``surrogate.png``  per objective: acceptance length vs budget as measured (by top-K) with the surrogate's
                   prediction over the space, the measured configs and the winner marked
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repro_py.report.plots import figure_title, finish_figure, pyplot
from repro_py.report.tables import load_run

_FATE_STYLE = {
    "gated: pass": ("o", "tab:green", "gated, passed"),
    "gated: FAIL": ("X", "tab:red", "gated, FAILED"),
    "dropped": ("v", "tab:gray", "dropped before the gates"),
    "failed": ("s", "black", "failed (start/benchmark)"),
}


def _fate(entry: dict[str, Any]) -> str:
    if entry["status"] == "failed" and entry["gates"] != "FAIL":
        return "failed"
    if entry["gates"] == "pass":
        return "gated: pass"
    if entry["gates"] == "FAIL":
        return "gated: FAIL"
    return "dropped"


def search_plot(doc: dict[str, Any], run_path: Path, path: Path) -> Path:
    run = load_run(run_path)
    objectives = doc["settings"]["objectives"]
    ladder = [r["name"] for r in doc["settings"]["ladder"]]
    fig, axes = pyplot().subplots(
        len(objectives), 1, figsize=(9, 3.4 * len(objectives)), squeeze=False, layout="constrained"
    )
    winners = {w["objective"]: w for w in doc["winners"]}
    for ax, obj in zip(axes[:, 0], objectives, strict=True):
        seen: set[str] = set()
        best: list[tuple[int, float]] = []
        top = 0.0
        for entry in doc["path"]:
            fate = _fate(entry)
            rung_name = next(
                (r for r in reversed(ladder) if (entry["rungs"].get(r) or {}).get("figures", {}).get(obj["key"])), None
            )
            value = None if rung_name is None else entry["rungs"][rung_name]["figures"][obj["key"]]["mean"]
            marker, color, text = _FATE_STYLE[fate]
            y = 0.0 if value is None else value
            ax.scatter(
                [entry["order"]], [y], marker=marker, color=color, label=None if text in seen else text, zorder=3
            )
            seen.add(text)
            if rung_name is not None and rung_name != ladder[-1]:
                ax.annotate(rung_name[0], (entry["order"], y), textcoords="offset points", xytext=(4, 3), fontsize=7)
            if fate == "gated: pass" and rung_name == ladder[-1] and value is not None:
                top = max(top, value)
            if top:
                best.append((entry["order"], top))
        if best:
            ax.step(
                [b[0] for b in best],
                [b[1] for b in best],
                where="post",
                color="tab:green",
                alpha=0.5,
                label="best gated so far (full rung)",
            )
        winner = winners.get(obj["key"]) or {}
        ax.set_title(f"{obj['title']}: winner {winner.get('label') or '-'}", fontsize="medium")
        ax.set_xlabel("restart # (letters: the rung where the config stopped)")
        ax.set_ylabel("output tok/s")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    fig.suptitle(figure_title("tuning: every restart and where it stopped", run))
    return finish_figure(fig, path, run)


def surrogate_plot(doc: dict[str, Any], run_path: Path, path: Path) -> Path:
    run = load_run(run_path)
    objectives = doc["settings"]["objectives"]
    screen = doc["settings"]["ladder"][0]["name"]
    fig, axes = pyplot().subplots(
        1, len(objectives), figsize=(5.5 * len(objectives), 4.2), squeeze=False, layout="constrained"
    )
    for ax, obj in zip(axes[0], objectives, strict=True):
        by_topk: dict[object, list[tuple[float, float]]] = {}
        for entry in doc["path"]:
            cfg = entry["config"]
            body = entry["rungs"].get(screen) or {}
            accept = (body.get("accept") or {}).get(obj["key"])
            if cfg.get("algorithm") == "ddtree" and accept:
                by_topk.setdefault(cfg.get("topk"), []).append((float(cfg["budget"]), float(accept)))
            elif cfg.get("algorithm") == "dflash" and accept:
                ax.axhline(float(accept), color="gray", linestyle=":", linewidth=1)
        for topk, points in sorted(by_topk.items(), key=lambda item: int(str(item[0]))):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], "o", label=f"top-K {topk}")
        predictions = (doc.get("predictions") or {}).get(obj["key"]) or []
        if predictions:
            ax2 = ax.twinx()
            ax2.scatter(
                [p["budget"] for p in predictions],
                [p["mean"] for p in predictions],
                s=8,
                color="tab:purple",
                alpha=0.35,
                label="surrogate decode tok/s (unmeasured)",
            )
            ax2.set_ylabel("surrogate: decode tok/s", color="tab:purple")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("DDTree budget (dotted: DFlash chain)")
        ax.set_ylabel("acceptance length (counters, screen)")
        ax.set_title(obj["title"], fontsize="medium")
        ax.grid(True, alpha=0.3)
        if by_topk:
            ax.legend(fontsize="small", loc="lower right")
    fig.suptitle(figure_title("what the surrogate learned from the screened configs", run))
    return finish_figure(fig, path, run)


def render_all(doc: dict[str, Any], run_path: Path, out_dir: Path) -> dict[str, Path]:
    return {
        "search": search_plot(doc, run_path, out_dir / "search.png"),
        "surrogate": surrogate_plot(doc, run_path, out_dir / "surrogate.png"),
    }
