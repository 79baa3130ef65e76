"""How long a sweep will take: inventory figures, else medians of earlier runs on the host, else defaults."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from repro_py.results.schema import ResultError, load_result
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target
from repro_py.sweep.lossless_restart import LosslessRestart

#: Fallback estimates when neither the inventory nor earlier runs say better.
DEFAULT_LOAD_S = {"real": 420.0, "simulated": 20.0}  # simulated: mostly the play's own overhead
DEFAULT_CELL_S = {"real": 45.0, "simulated": 1.0}
DEFAULT_GATES_S = {"real": 120.0, "simulated": 2.0}


def history(results_root: Path, host: str) -> tuple[float | None, float | None, float | None, int]:
    """Medians from earlier runs on ``host``: restart time, benchmark time per cell per (repeat x
    output token), gates time; and how many earlier configs they come from.

    The restart time is the whole reconfigure (the play's own overhead included)
    where recorded, else the engine's time to ready; the lossless gate's own restart
    is a restart like any other. The gates time is every gate's, on whichever restart.
    """
    restarts: list[float] = []
    per_cell: list[float] = []
    gates: list[float] = []
    count = 0
    if not results_root.is_dir():
        return None, None, None, 0
    for path in results_root.glob("*/configs/*.json"):
        try:
            doc = load_result(path)
        except ResultError:  # an unreadable earlier result only narrows the history
            continue
        if doc["fingerprint"].get("host") != host or doc["status"] != "ok":
            continue
        count += 1
        timing = doc.get("timing") or {}
        if isinstance(timing.get("reconfigure_s"), int | float):
            restarts.append(float(timing["reconfigure_s"]))
        elif isinstance(doc["reconfigure"].get("time_to_ready_s"), int | float):
            restarts.append(float(doc["reconfigure"]["time_to_ready_s"]))
        if isinstance(timing.get("lossless_reconfigure_s"), int | float):
            restarts.append(float(timing["lossless_reconfigure_s"]))
        cells = doc["bench"].get("cells") or []
        settings = doc["bench"].get("settings") or {}
        work = float(settings.get("repeats") or 1) * float(settings.get("max_tokens") or 1)
        if cells and isinstance(timing.get("bench_s"), int | float):
            per_cell.append(float(timing["bench_s"]) / len(cells) / max(work, 1.0))
        if isinstance(timing.get("gates_s"), int | float):
            gates.append(float(timing["gates_s"]) + float(timing.get("lossless_gate_s") or 0.0))

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    return med(restarts), med(per_cell), med(gates), count


def estimate(
    target: Target, configs: Sequence[PlannedConfig], bench: BenchPlan, results_root: Path, *,
    lossless: LosslessRestart | None = None,
) -> dict[str, float]:
    """Per config: its restarts (two when the lossless gate has its own: ``lossless``) + cells + gates; then the
    restore."""
    per_restarts = (lossless or LosslessRestart()).restarts_per_config
    kind = target.engine_kind
    hist_load, hist_cell, hist_gates, measured = history(results_root, target.host)
    load = target.var("sweep_load_time_s") or hist_load or DEFAULT_LOAD_S[kind]
    if hist_cell is not None:
        hist_cell *= bench.repeats * bench.max_tokens
    cell = target.var("sweep_cell_time_s") or hist_cell or DEFAULT_CELL_S[kind] * bench.repeats
    gates = target.var("sweep_gates_time_s") or hist_gates or DEFAULT_GATES_S[kind]
    per_config = float(load) * per_restarts + float(cell) * bench.cells + float(gates)
    restore = float(load)
    return {
        "load_s_per_config": float(load),
        "bench_s_per_cell": float(cell),
        "gates_s_per_config": float(gates),
        "restarts_per_config": float(per_restarts),
        "restarts": float(per_restarts * len(configs) + 1),  # the restore included
        "per_config_s": per_config,
        "total_s": per_config * len(configs) + restore,
        "history_configs": float(measured),
        "inventory_figures": float(
            sum(1 for k in ("sweep_load_time_s", "sweep_cell_time_s", "sweep_gates_time_s") if target.var(k))
        ),
    }


def estimate_basis(est: Mapping[str, float]) -> str:
    """Where an estimate's figures come from, in words (a fresh host has no measured history)."""
    measured = int(est.get("history_configs", 0))
    given = int(est.get("inventory_figures", 0))
    parts = [f"measured history: {measured} config(s) of earlier runs on this host"] if measured else []
    if given:
        parts.append(f"{given} figure(s) from the inventory (sweep_*_time_s)")
    if not measured:
        parts.append("no measured history: estimate from defaults" if not given else "no measured history")
    return "; ".join(parts)


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
