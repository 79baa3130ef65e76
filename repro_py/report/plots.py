"""PNG plots of a sweep run (matplotlib, Agg backend; no display needed).

``tps_vs_concurrency.png``   aggregate tok/s vs concurrency, one line per config, one panel per context
``acceptance_vs_budget.png`` acceptance length vs DDTree budget (one line per top-K; DFlash as reference lines)
``pareto.png``               single-stream vs aggregate tok/s, the Pareto front of gate-passing configs

Every title names the sampling setting its figures were measured at
(``sampling T=0.7, top_p=0.95``); a run measured at several settings gets one
set of plots per setting (``tps_vs_concurrency-temp0.7-topp0.95.png``), so
figures of two settings never share a plot.

Figures measured under deterministic inference (``--lossless-restart shared``,
or an inventory that deploys it) say so in every title and in the PNG ``Title``
metadata (``Run.figures_label``).

A simulated run carries SIMULATED and its sim-speed factor in every title
(``SIMULATED, sim-speed x10: figures are model outputs x10``), in the PNG
``Title`` metadata and in a watermark. When the results come from several
sim speeds, the title says MIXED and every config's legend entry or
annotation carries its own factor, so figures are never mixed silently.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repro_py.report.tables import Run, cell_rows, sim_speed
from repro_py.simmark import SIM_MARK, sim_note, speed_text


@functools.cache
def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display), imported on the first plot: it is half of a CLI's
    start-up, and most commands (``--help``, a plan, a resume that only reports) draw nothing (public: the
    tuner's plots use it too)."""
    import matplotlib  # noqa: PLC0415 (heavy; only when a plot is drawn)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (heavy; only when a plot is drawn)

    return plt


def figure_title(text: str, run: Run) -> str:
    """The plot's title with the sampling setting of its figures, and what they were measured under when that
    is not the production config (``deterministic inference, --lossless-restart shared``); a simulated run's
    gets a line with the sim-speed note (the tuner's plots use it too)."""
    settings = run.samplings
    sampling = f"sampling {settings[0].text}" if len(settings) == 1 else (
        "MIXED sampling: " + " / ".join(s.text for s in settings)
    )  # fmt: skip
    label = run.figures_label
    title = f"{text}\n{sampling}" + (f", {label}" if label else "")
    return f"{title}\n{sim_note(run.sim_speeds)}" if run.simulated else title


def _watermark(run: Run) -> str:
    speeds = run.sim_speeds
    if len(speeds) == 1:
        return f"{SIM_MARK} {speed_text(speeds[0])}"
    return f"{SIM_MARK} MIXED" if speeds else SIM_MARK


def _speed_suffix(run: Run, speed: float | None) -> str:
    """`` [x10]`` after a config's name when the run mixes sim speeds; empty otherwise."""
    return f" [{speed_text(speed)}]" if run.mixed_speeds else ""


def finish_figure(fig: Any, path: Path, run: Run) -> Path:
    """Watermark a simulated run's figure, set the PNG Title metadata, write it atomically (public: the tuner's
    plots use it too)."""
    simulated = run.simulated
    if simulated:
        fig.text(
            0.5,
            0.5,
            _watermark(run),
            fontsize=54,
            color="red",
            alpha=0.12,
            ha="center",
            va="center",
            rotation=30,
            weight="bold",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    title = f"{path.stem} ({sim_note(run.sim_speeds)})" if simulated else path.stem
    if run.figures_label:
        title += f"; {run.figures_label}"
    fig.savefig(tmp, format="png", dpi=110, metadata={"Title": title})
    pyplot().close(fig)
    tmp.replace(path)
    return path


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def tps_vs_concurrency(run: Run, path: Path) -> Path:
    contexts = run.contexts or [0]
    fig, axes = pyplot().subplots(
        1, len(contexts), figsize=(4.2 * len(contexts) + 2.5, 4.4), squeeze=False, layout="constrained"
    )
    series: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
    gate_ok: dict[str, bool] = {}
    for item in cell_rows(run):
        if item["output_tps"] is None:
            continue
        label = str(item["label"]) + _speed_suffix(run, item["sim_speed"])
        series[(int(item["context"]), label)].append((int(item["concurrency"]), float(item["output_tps"])))
        gate_ok[label] = bool(item["gates_passed"])
    for ax, context in zip(axes[0], contexts, strict=True):
        plotted = False
        for (ctx, label), points in sorted(series.items()):
            if ctx != context:
                continue
            points.sort()
            style = "-" if gate_ok.get(label) else ":"
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                style,
                marker="o",
                label=label + ("" if gate_ok.get(label) else " (gate failed)"),
            )
            plotted = True
        ax.set_title(f"context {context} tokens")
        if plotted:
            ax.set_xscale("log", base=2)
            ticks = run.concurrency
            ax.set_xticks(ticks, labels=[str(t) for t in ticks])
            ax.minorticks_off()
            ax.set_xlabel("concurrency")
            ax.set_ylabel("aggregate output tok/s")
            ax.grid(True, alpha=0.3)
        else:
            _empty(ax, "no successful cells")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize="small")
    fig.suptitle(figure_title("tokens/s vs concurrency per config", run))
    return finish_figure(fig, path, run)


def acceptance_vs_budget(run: Run, path: Path) -> Path:
    contexts, conc = run.contexts, run.concurrency
    short = contexts[0] if contexts else None
    low = conc[0] if conc else None
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2))
    by_topk: dict[tuple[object, object, object, float | None], list[tuple[int, float]]] = defaultdict(list)
    flat: list[tuple[str, float]] = []
    failed: list[tuple[str, int, float]] = []
    for result in run.results:
        cfg: Mapping[str, Any] = result.get("config") or {}
        accept = None
        for cell in (result.get("bench") or {}).get("cells") or []:
            if cell.get("context") == short and cell.get("concurrency") == low and cell.get("status") == "ok":
                accept = (cell.get("median") or {}).get("accept_length")
        if not isinstance(accept, int | float):
            continue
        speed = sim_speed(result) if run.mixed_speeds else None
        label = str(result.get("label")) + _speed_suffix(run, speed)
        if result.get("status") != "ok" or not (result.get("gates") or {}).get("passed"):
            if isinstance(cfg.get("budget"), int):
                failed.append((label, int(cfg["budget"]), float(accept)))
            continue
        if cfg.get("algorithm") == "ddtree" and isinstance(cfg.get("budget"), int):
            key = (cfg.get("topk"), cfg.get("block_size"), cfg.get("window"), speed)
            by_topk[key].append((int(cfg["budget"]), float(accept)))
        else:
            flat.append((label, float(accept)))
    for (topk, block, window, speed), points in sorted(by_topk.items(), key=lambda kv: str(kv[0])):
        points.sort()
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            label=f"ddtree topk={topk} bs={block} w={window}" + _speed_suffix(run, speed),
        )
    for label, accept in flat:
        ax.axhline(accept, linestyle="--", alpha=0.6, label=f"{label} ({accept:.2f})")
    for label, budget, accept in failed:
        ax.scatter([budget], [accept], marker="x", color="red", label=f"{label} (gate failed)")
    if by_topk or flat or failed:
        ax.set_xlabel("DDTree budget (nodes)")
        ax.set_ylabel(f"acceptance length (context {short}, concurrency {low})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no acceptance figures")
    ax.set_title(figure_title("acceptance vs budget", run))
    fig.tight_layout()
    return finish_figure(fig, path, run)


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Points not dominated in (x, y), both larger-is-better; sorted by x."""
    front = [
        p for p in points if not any(q[1] >= p[1] and q[2] >= p[2] and (q[1] > p[1] or q[2] > p[2]) for q in points)
    ]
    return sorted(front, key=lambda p: p[1])


def pareto(run: Run, table: Sequence[Mapping[str, Any]], path: Path) -> Path:
    fig, ax = pyplot().subplots(figsize=(6.5, 4.8))
    ok_points: list[tuple[str, float, float]] = []
    bad_points: list[tuple[str, float, float]] = []
    for row in table:
        x, y = row.get("single_stream_tps"), row.get("aggregate_tps")
        if not isinstance(x, int | float) or not isinstance(y, int | float):
            continue
        label = str(row["label"]) + _speed_suffix(run, row.get("sim_speed"))
        (ok_points if row.get("gates_passed") else bad_points).append((label, float(x), float(y)))
    if ok_points or bad_points:
        if ok_points:
            ax.scatter([p[1] for p in ok_points], [p[2] for p in ok_points], label="gates passed")
            if run.mixed_speeds:  # a front across sim speeds would compare figures that are not comparable
                ax.plot([], [], " ", label="no Pareto front: mixed sim speeds")
            else:
                front = pareto_front(ok_points)
                ax.plot(
                    [p[1] for p in front], [p[2] for p in front], "-", color="green", alpha=0.6, label="Pareto front"
                )
        if bad_points:
            ax.scatter(
                [p[1] for p in bad_points], [p[2] for p in bad_points], marker="x", color="red", label="gate failed"
            )
        for label, x, y in ok_points + bad_points:
            ax.annotate(label, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        conc = run.concurrency
        ax.set_xlabel(f"single-stream tok/s (concurrency {conc[0] if conc else '?'})")
        ax.set_ylabel(f"aggregate tok/s (concurrency {conc[-1] if conc else '?'})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    else:
        _empty(ax, "no configs with both figures")
    ax.set_title(figure_title("single-stream vs aggregate throughput", run))
    fig.tight_layout()
    return finish_figure(fig, path, run)


PLOTS = ("tps_vs_concurrency", "acceptance_vs_budget", "pareto")


def render_all(run: Run, table: Sequence[Mapping[str, Any]], out_dir: Path) -> dict[str, Path]:
    """Every plot, once per sampling setting of the run: ``<plot>.png`` for a run of one setting, else
    ``<plot><setting's label suffix>.png`` (the greedy setting keeps the plain name)."""
    out: dict[str, Path] = {}
    for sampling in run.samplings:
        part = run.only(sampling) if run.mixed_samplings else run
        rows = [r for r in table if r.get("sampling") == sampling.text] if run.mixed_samplings else list(table)
        suffix = sampling.label_suffix if run.mixed_samplings else ""
        out[f"tps_vs_concurrency{suffix}"] = tps_vs_concurrency(part, out_dir / f"tps_vs_concurrency{suffix}.png")
        out[f"acceptance_vs_budget{suffix}"] = acceptance_vs_budget(
            part, out_dir / f"acceptance_vs_budget{suffix}.png"
        )
        out[f"pareto{suffix}"] = pareto(part, rows, out_dir / f"pareto{suffix}.png")
    return out
