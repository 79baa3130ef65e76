"""Tables of a sweep run, from its files only (``plan.json``, ``configs/*.json``).

Objective figures per config (medians over repeats, from the bench cells):

``single_stream_tps``  aggregate output tok/s at the lowest concurrency, shortest context
``aggregate_tps``      aggregate output tok/s at the highest concurrency, shortest context
``long_context_tps``   aggregate output tok/s at the lowest concurrency, longest context
``accept_length``      counter-derived acceptance length at the single-stream cell

Every row carries the sampling setting its benchmark sent (``temperature``,
``top_p``, ``sampling``: :mod:`repro_py.sampling_settings`); a run whose
results were measured at several settings is reported per setting
(:meth:`Run.only`), never pooled.

Every row says what its figures were measured under: ``deterministic_inference``
(the engine's own ``/server_info``) and the run's ``lossless_restart`` mode; a run
whose figures come from deterministic inference (``--lossless-restart shared``,
or an inventory that deploys it) says so in every heading, table and plot title
(:meth:`Run.figures_label`), never silently.

Also at the single-stream cell: TTFT, the inter-token latency both per chunk
(gaps between text chunks) and per token (time per output token after the
first), and the client/engine ratio of mean end-to-end latency (the engine's
own histograms; near 1 means the two clocks agree). A failed cell or repeat
never gives a figure: ``failed_cells``/``failed_repeats`` count them and
``failures(result)`` lists each with its reason.

A fleet sweep's result names its host: its ranked tok/s figures (and the per-cell tok/s of
:func:`cell_rows`) are corrected by the host's offset, the figures as measured kept as ``*_raw``
(:mod:`repro_py.report.hosts`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from repro_py import sampling_settings
from repro_py.report import hosts
from repro_py.results.lossless_mode import DETERMINISTIC_LABEL, FLAG, SHARED, stored_mode
from repro_py.results.schema import ConfigResult, ResultError, load_result
from repro_py.sampling_settings import Sampling
from repro_py.simmark import SIM_MARK, distinct_speeds, speed_text
from repro_py.spec_config import SHORT_KEYS

CSV_COLUMNS: tuple[str, ...] = (
    "engine",
    "sim_speed",
    "label",
    *SHORT_KEYS,
    "sim_fault",
    "temperature",
    "top_p",
    "deterministic_inference",
    "lossless_restart",
    "lossless_gate_restart",
    "status",
    "failure_class",
    "failure_reason",
    "gates_passed",
    "lossless_verdict",
    "sandbox",
    "single_stream_tps",
    "single_stream_cv",
    "aggregate_tps",
    "aggregate_cv",
    "long_context_tps",
    "long_context_cv",
    "accept_length",
    "ttft_p50_ms",
    "itl_chunk_p50_ms",
    "itl_token_p50_ms",
    "client_engine_e2e_ratio",
    "noisy_cells",
    "failed_cells",
    "failed_repeats",
    "time_to_ready_s",
    "engine_version",
    "unit_sha256",
    "wall_s",
)


@dataclasses.dataclass
class Run:
    path: Path
    plan: dict[str, Any]
    results: list[ConfigResult]
    state: dict[str, Any]
    #: result files refused by the schema check, each with the file and the bad key (never counted)
    refused: list[str] = dataclasses.field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.plan.get("run_id") or self.path.name)

    @property
    def simulated(self) -> bool:
        if self.plan.get("simulated") is True:
            return True
        return any((r.get("engine") or {}).get("kind") == "simulated" for r in self.results) or any(
            (r.get("fingerprint") or {}).get("engine_kind") == "simulated" for r in self.results
        )

    @property
    def sim_speeds(self) -> list[float]:
        """The distinct ``--sim-speed`` factors of the results (empty for a real run)."""
        return distinct_speeds(sim_speed(r) for r in self.results)

    @property
    def mixed_speeds(self) -> bool:
        """True when the results come from more than one sim speed: their figures are not comparable."""
        return len(self.sim_speeds) > 1

    @property
    def samplings(self) -> list[Sampling]:
        """The distinct sampling settings the results were measured at (the plan's when there are none yet)."""
        found = sampling_settings.distinct([sampling_settings.of_result(r) for r in self.results])
        return found or [sampling_settings.of_result(self.plan)]

    @property
    def mixed_samplings(self) -> bool:
        return len(self.samplings) > 1

    @property
    def lossless_mode(self) -> str | None:
        """The run's ``--lossless-restart`` mode (None: planned before it existed)."""
        return stored_mode(self.plan)

    @property
    def figures_inference(self) -> str:
        """What the figures were measured under: ``deterministic``, ``production`` (no deterministic inference),
        ``mixed`` or ``unknown`` (each engine's own ``/server_info`` says; else the plan)."""
        flags = {(r.get("engine") or {}).get("deterministic_inference") for r in self.results} - {None}
        if not flags:
            planned = (self.plan.get("lossless_restart") or {}).get("figures_deterministic")
            flags = {planned} if isinstance(planned, bool) else set()
        if not flags:
            return "unknown"
        return "mixed" if len(flags) > 1 else ("deterministic" if True in flags else "production")

    @property
    def figures_label(self) -> str | None:
        """The words every heading and plot title carries when the figures are not the production config's
        (deterministic inference, or a mix); None for production figures (or a run that does not say)."""
        kind = self.figures_inference
        if kind == "mixed":
            return f"MIXED: some figures under {DETERMINISTIC_LABEL}, some as deployed (see each row)"
        if kind != "deterministic":
            return None
        mode = self.lossless_mode
        how = f"{FLAG} shared" if mode == SHARED else "as the inventory deploys" if mode else "the run's setting"
        return f"{DETERMINISTIC_LABEL}, {how}"

    def only(self, sampling: Sampling) -> Run:
        """The same run restricted to the results measured at ``sampling`` (figures of one setting only)."""
        kept = [r for r in self.results if sampling_settings.of_result(r) == sampling]
        return dataclasses.replace(self, results=kept)

    @property
    def contexts(self) -> list[int]:
        return sorted({int(c["context"]) for r in self.results for c in _cells(r) if "context" in c}) or list(
            (self.plan.get("bench") or {}).get("contexts") or []
        )

    @property
    def concurrency(self) -> list[int]:
        return sorted({int(c["concurrency"]) for r in self.results for c in _cells(r) if "concurrency" in c}) or list(
            (self.plan.get("bench") or {}).get("concurrency") or []
        )


def _load_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def load_run(path: Path) -> Run:
    plan = _load_json(path / "plan.json")
    results: list[ConfigResult] = []
    refused: list[str] = []
    for result_path in sorted((path / "configs").glob("*.json")):
        try:
            results.append(load_result(result_path))
        except ResultError as exc:
            refused.append(str(exc))
    order = {item.get("label"): i for i, item in enumerate(plan.get("configs") or []) if isinstance(item, dict)}
    results.sort(key=lambda r: (order.get(r["label"], len(order)), r["label"]))
    return Run(path=path, plan=plan, results=results, state=_load_json(path / "state.json"), refused=refused)


def sim_speed(result: Mapping[str, Any]) -> float | None:
    """The engine's ``--sim-speed`` factor for one result (None for a real engine or when unknown)."""
    return _num((result.get("engine") or {}).get("sim_speed"))


def _sim_mark(result: Mapping[str, Any]) -> str:
    """``SIMULATED x10`` for a row; plain ``SIMULATED`` when the engine never reported its speed."""
    speed = sim_speed(result)
    return SIM_MARK if speed is None else f"{SIM_MARK} {speed_text(speed)}"


def _cells(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    cells = (result.get("bench") or {}).get("cells") or []
    return [c for c in cells if isinstance(c, dict)]


FAILED_CELL = ("failed", "error")  # "error" is how results before the failed/ok rule named a failed cell


def failures(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every failed cell of a result, with its reason and its failed repeats (each with its reason)."""
    out: list[dict[str, Any]] = []
    for cell in _cells(result):
        repeats = [r for r in cell.get("repeats") or [] if isinstance(r, dict) and r.get("status") == "failed"]
        if cell.get("status") in FAILED_CELL:
            out.append({
                "label": result.get("label"),
                "context": cell.get("context"),
                "concurrency": cell.get("concurrency"),
                "reason": cell.get("reason"),
                "repeats": [{"repeat": r.get("repeat"), "reason": r.get("reason"), "errors": r.get("errors"),
                             "requests": r.get("requests")} for r in repeats],
                "repeats_ok": cell.get("repeats_ok"),
                "repeats_total": len(cell.get("repeats") or []),
            })
    return out


def find_cell(result: Mapping[str, Any], context: int | None, concurrency: int | None) -> dict[str, Any] | None:
    for cell in _cells(result):
        if cell.get("context") == context and cell.get("concurrency") == concurrency and cell.get("status") == "ok":
            return cell
    return None


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def cell_figure(cell: Mapping[str, Any] | None, key: str) -> float | None:
    if cell is None:
        return None
    return _num((cell.get("median") or {}).get(key))


def cell_cv(cell: Mapping[str, Any] | None) -> float | None:
    if cell is None:
        return None
    return _num((cell.get("cv") or {}).get("output_tps"))


def _pct(cell: Mapping[str, Any] | None, key: str) -> float | None:
    if cell is None:
        return None
    block = (cell.get("median") or {}).get(key) or {}
    return _num(block.get("p50")) if isinstance(block, Mapping) else None


def _itl_chunk(cell: Mapping[str, Any] | None) -> float | None:
    """Per-chunk ITL p50 (results before per-token ITL called it ``itl_ms``)."""
    chunk = _pct(cell, "itl_chunk_ms")
    return chunk if chunk is not None else _pct(cell, "itl_ms")


def _e2e_ratio(cell: Mapping[str, Any] | None) -> float | None:
    ratio = (cell or {}).get("median") or {}
    block = ratio.get("timing_ratio") if isinstance(ratio, Mapping) else None
    return _num(block.get("e2e_mean_ms")) if isinstance(block, Mapping) else None


def gates_passed(result: Mapping[str, Any]) -> bool:
    gates = result.get("gates") or {}
    return result.get("status") == "ok" and gates.get("passed") is True


def gates_state(result: Mapping[str, Any]) -> str:
    """``pass``, ``FAIL``, or ``not run`` (a finished config the measure chose not to gate, e.g. a tuner's
    screened-out config: never eligible to win, not a failure)."""
    if gates_passed(result):
        return "pass"
    gates = result.get("gates") or {}
    return "not run" if result.get("status") == "ok" and gates.get("skipped") is True else "FAIL"


def sampled_gate_text(run: Run) -> str:
    """The setting the results' sampled gates sampled at ("T=1, top_p=0.9"; several joined; "-" when none ran)."""
    found = []
    for result in run.results:
        setting = ((result.get("gates") or {}).get("sampled") or {}).get("setting")
        if isinstance(setting, Mapping):
            found.append(Sampling(float(setting.get("temperature", 0.0)), float(setting.get("top_p", 1.0))))
    return " / ".join(s.text for s in sampling_settings.distinct(found)) or "-"


def gate_details(result: Mapping[str, Any]) -> dict[str, Any]:
    """The lossless verdict, the sampled gate's verdict (and p-value), the coding score and the sandbox mode its
    candidates were judged in ("-": not run)."""
    gates = result.get("gates") or {}
    lossless = gates.get("lossless") if isinstance(gates.get("lossless"), Mapping) else {}
    sampled = gates.get("sampled") if isinstance(gates.get("sampled"), Mapping) else {}
    p_value = (sampled or {}).get("p_value")
    coding = gates.get("coding") if isinstance(gates.get("coding"), Mapping) else {}
    log = (lossless or {}).get("server_log") or {}
    return {
        "lossless_gate_restart": (lossless or {}).get("restart") or "-",
        "lossless_verdict": (lossless or {}).get("verdict") or "-",
        "lossless_reason": (lossless or {}).get("reason"),
        "sampled_verdict": ((sampled or {}).get("verdict") or "-") + (f" (p={p_value:.3g})" if p_value else ""),
        "sampled_reason": (sampled or {}).get("reason"),
        "sampled_passed": (sampled or {}).get("passed"),
        "server_log": ("clean" if log.get("passed") else "NOT clean") if log.get("scanned") else "not scanned",
        "coding_score": f"{coding.get('pass_count')}/{coding.get('total')}" if coding else "-",
        "sandbox": (coding or {}).get("isolation_mode") or "-",
    }


def _inference_text(flag: object) -> str:
    return {True: "deterministic", False: "as deployed"}.get(flag, "-") if isinstance(flag, bool) else "-"


def row(run: Run, result: Mapping[str, Any]) -> dict[str, Any]:
    contexts, conc = run.contexts, run.concurrency
    short = contexts[0] if contexts else None
    long_ = contexts[-1] if contexts else None
    low = conc[0] if conc else None
    high = conc[-1] if conc else None
    single = find_cell(result, short, low)
    agg = find_cell(result, short, high)
    longc = find_cell(result, long_, low)
    cfg = result.get("config") or {}
    failure = result.get("failure") or {}
    engine = result.get("engine") or {}
    fp = result.get("fingerprint") or {}
    cells = _cells(result)
    simulated = engine.get("kind") == "simulated" or fp.get("engine_kind") == "simulated" or run.simulated
    out: dict[str, Any] = {
        "engine": SIM_MARK if simulated else "real",
        "sim_mark": _sim_mark(result) if simulated else None,
        "label": result.get("label"),
        **{key: cfg.get(key) for key in SHORT_KEYS},
        "sim_fault": cfg.get("sim_fault"),
        "temperature": sampling_settings.of_result(result).temperature,
        "top_p": sampling_settings.of_result(result).top_p,
        "sampling": sampling_settings.of_result(result).text,
        "deterministic_inference": engine.get("deterministic_inference"),
        "inference": _inference_text(engine.get("deterministic_inference")),
        "lossless_restart": result.get("lossless_restart"),
        "status": result.get("status"),
        "failure_class": failure.get("class"),
        "failure_reason": failure.get("reason"),
        "journal": list(failure.get("journal") or []),
        "gates_passed": gates_passed(result),
        "gates_state": gates_state(result),
        **gate_details(result),
        "single_stream_tps": cell_figure(single, "output_tps"),
        "single_stream_cv": cell_cv(single),
        "aggregate_tps": cell_figure(agg, "output_tps"),
        "aggregate_cv": cell_cv(agg),
        "long_context_tps": cell_figure(longc, "output_tps"),
        "long_context_cv": cell_cv(longc),
        "accept_length": cell_figure(single, "accept_length"),
        "ttft_p50_ms": _pct(single, "ttft_ms"),
        "itl_chunk_p50_ms": _itl_chunk(single),
        "itl_token_p50_ms": _pct(single, "itl_token_ms"),
        "client_engine_e2e_ratio": _e2e_ratio(single),
        "noisy_cells": sum(1 for c in cells if c.get("noisy")),
        "failed_cells": sum(1 for c in cells if c.get("status") in FAILED_CELL),
        "failed_repeats": sum(
            1 for c in cells for r in c.get("repeats") or [] if isinstance(r, dict) and r.get("status") == "failed"
        ),
        "cell_failures": failures(result),
        "time_to_ready_s": _num((result.get("reconfigure") or {}).get("time_to_ready_s")),
        "sim_speed": sim_speed(result),
        "engine_version": engine.get("version") or fp.get("sglang_version"),
        "unit_sha256": fp.get("unit_sha256"),
        "wall_s": _num(result.get("wall_s")),
    }
    out.update(hosts.fields(result, out))  # a fleet sweep's host: its offset corrects the ranked figures
    return out


def rows(run: Run) -> list[dict[str, Any]]:
    return [row(run, r) for r in run.results]


def cell_rows(run: Run) -> Iterable[dict[str, Any]]:
    """One row per (config, cell): for plots and the per-cell CSV."""
    for result in run.results:
        for cell in _cells(result):
            yield {
                "label": result.get("label"),
                "sampling": sampling_settings.of_result(result).text,
                "sim_speed": sim_speed(result),
                "status": result.get("status"),
                "gates_passed": gates_passed(result),
                "context": cell.get("context"),
                "concurrency": cell.get("concurrency"),
                "cell_status": cell.get("status"),
                "running_cap": cell.get("running_cap"),
                "output_tps": hosts.correct(result, cell_figure(cell, "output_tps")) if cell.get("status") == "ok"
                else None,
                "accept_length": cell_figure(cell, "accept_length") if cell.get("status") == "ok" else None,
                "cv": cell_cv(cell),
                "noisy": bool(cell.get("noisy")),
            }


def _csv_value(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("\n", " ")


def to_csv(table: list[dict[str, Any]]) -> str:
    """One row per config; a fleet run's (a result with a host) also has the host's columns and the raw figures."""
    columns = CSV_COLUMNS + (hosts.FLEET_CSV_COLUMNS if any(item.get("host") for item in table) else ())
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for item in table:
        writer.writerow([_csv_value(item.get(col)) for col in columns])
    return buf.getvalue()
