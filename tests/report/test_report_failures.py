"""How a failed cell and a failed repeat appear in the report, and the per-token ITL / timing-ratio figures."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

from repro_py.report import tables
from repro_py.report.render import build_report
from tests.report.conftest import ddtree, result, standard_results


def _crashed() -> dict[str, object]:
    doc = result("ddtree-b12-t6-w2048-bs8", ddtree(12, 6), single=140, simulated=True,
                 failure={"class": "crashed_during_benchmark",
                          "reason": "the benchmark failed (1/9 cells failed; first: context=60 concurrency=1: ...)",
                          "journal": ["engine: Scheduler hit an exception", "exit 1"]})
    first = doc["bench"]["cells"][0]  # type: ignore[index]
    first.update(
        status="failed",
        reason="1/2 repeats failed (excluded from every figure): repeat 1: 4/4 requests failed (error budget 0); "
               "first: finish_reason 'abort'",
        repeats_ok=1,
        repeats=[
            {"repeat": 0, "status": "ok", "reason": None, "errors": 0, "requests": 4, "output_tps": 1797.8},
            {"repeat": 1, "status": "failed", "errors": 4, "requests": 4, "output_tps": 0.0,
             "reason": "4/4 requests failed (error budget 0); first: finish_reason 'abort'"},
        ],
    )
    return doc


def test_a_failed_cell_and_its_failed_repeat_are_listed_with_reasons_and_give_no_figure(
    make_run: Callable[..., Path],
) -> None:
    run_dir = make_run(results=[*standard_results(), _crashed()])
    row = next(r for r in tables.rows(tables.load_run(run_dir)) if r["label"] == "ddtree-b12-t6-w2048-bs8")
    assert row["single_stream_tps"] is None  # the failed cell's median never becomes a figure
    assert (row["failed_cells"], row["failed_repeats"]) == (1, 1)
    paths = build_report(run_dir)
    text = paths["summary_md"].read_text()
    section = text.split("## Failed cells and repeats")[1].split("## Failed configs")[0]
    greedy = "T=0 (greedy), top_p=1"
    assert f"| ddtree-b12-t6-w2048-bs8 | {greedy} | 60 | 1 | 1/2 | 1/2 repeats failed (excluded from every figure)" \
        in section
    assert "| repeat 1 failed | 4/4 requests failed: 4/4 requests failed (error budget 0); first: finish_reason" \
        in section
    assert "1797.8" not in text.split("## Results")[1].split("## Failed cells")[0]
    rows = {r["label"]: r for r in csv.DictReader(io.StringIO(paths["summary_csv"].read_text()))}
    assert rows["ddtree-b12-t6-w2048-bs8"]["failed_cells"] == "1"
    assert rows["ddtree-b12-t6-w2048-bs8"]["failed_repeats"] == "1"
    assert rows["ddtree-b12-t6-w2048-bs8"]["single_stream_tps"] == ""


def test_per_token_and_per_chunk_itl_and_the_timing_ratio_are_reported(make_run: Callable[..., Path]) -> None:
    docs = standard_results()
    for doc in docs:
        for cell in doc["bench"]["cells"]:
            med = cell["median"]
            med["itl_chunk_ms"] = med.pop("itl_ms")
            med["itl_token_ms"] = {"p50": 1.25, "p90": 1.5, "p99": 2.0}
            med["timing_ratio"] = {"e2e_mean_ms": 1.012, "ttft_mean_ms": 1.03}
    paths = build_report(make_run(results=docs))
    rows = {r["label"]: r for r in csv.DictReader(io.StringIO(paths["summary_csv"].read_text()))}
    b8 = rows["ddtree-b8-t4-w2048-bs8"]
    assert (b8["itl_chunk_p50_ms"], b8["itl_token_p50_ms"], b8["client_engine_e2e_ratio"]) == ("6", "1.25", "1.012")
    text = paths["summary_md"].read_text()
    assert "ITL p50 ms per chunk / per token" in text and "| 6.0 / 1.25 | 1.012 |" in text


def test_results_from_before_per_token_itl_still_report_the_chunk_itl(make_run: Callable[..., Path]) -> None:
    rows = {r["label"]: r for r in tables.rows(tables.load_run(make_run()))}
    assert rows["ddtree-b8-t4-w2048-bs8"]["itl_chunk_p50_ms"] == 6.0
    assert rows["ddtree-b8-t4-w2048-bs8"]["itl_token_p50_ms"] is None
