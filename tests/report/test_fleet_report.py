"""The report side of a fleet sweep: offsets correct the ranked figures (raw kept), no winner across host classes,
the re-measured configs and the host column in a class's summary, fleet.md, and the CLI choosing it."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from repro_py.exitcodes import ExitCode
from repro_py.report import recommend, tables
from repro_py.report.cli import main
from repro_py.report.fleet import build_fleet_report, is_fleet_run
from repro_py.report.render import build_report
from tests.report.conftest import ddtree, result, standard_results, write_run

CLASS_A = "h200x8-drv580-cu13.0-sgl0.5.23-s1a2b3c"
CLASS_B = "b300x8-drv580-cu13.0-sgl0.5.23-s1a2b3c"
LOST = "unreachable: ssh: connect to host 127.0.0.1 port 31031: Connection refused"


def on_host(doc: dict[str, Any], name: str, klass: str, offset: float | None, uncertainty: float | None = None, *,
            attempts: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    doc = dict(doc, host={"name": name, "class": klass, "offset": offset, "offset_uncertainty": uncertainty})
    if attempts is not None:
        doc["attempts"] = attempts
    return doc


def _row(make_run: Callable[..., Path], doc: dict[str, Any]) -> dict[str, Any]:
    run = tables.load_run(make_run(results=[doc]))
    return tables.row(run, run.results[0])


def test_a_hosts_offset_corrects_the_ranked_figures_and_the_raw_ones_are_kept(make_run: Callable[..., Path]) -> None:
    doc = result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4), single=150, aggregate=800, long_ctx=90, cv=0.04)
    attempt = {"host": "sglang-fleet-1", "cause": LOST, "failure": None, "at": "2026-12-02T20:01:02+00:00"}
    row = _row(make_run, on_host(doc, "sglang-fleet-2", CLASS_A, 0.25, 0.03, attempts=[attempt]))
    assert row["single_stream_tps"] == pytest.approx(120.0)  # 150 / 1.25
    assert row["aggregate_tps"] == pytest.approx(640.0)
    assert row["long_context_tps"] == pytest.approx(72.0)
    for cv in ("single_stream_cv", "aggregate_cv", "long_context_cv"):
        assert row[cv] == pytest.approx(0.05)  # sqrt(0.04**2 + 0.03**2)
        assert row[f"{cv}_raw"] == pytest.approx(0.04)
    assert (row["single_stream_tps_raw"], row["aggregate_tps_raw"], row["long_context_tps_raw"]) == (150, 800, 90)
    assert row["host"] == "sglang-fleet-2" and row["host_class"] == CLASS_A
    assert row["host_offset"] == 0.25 and row["host_offset_uncertainty"] == 0.03 and row["attempts"] == 1
    assert row["accept_length"] == 4.5  # not a tok/s figure: never corrected
    cells = {(c["context"], c["concurrency"]): c["output_tps"] for c in tables.cell_rows(tables.load_run(
        make_run("cells", results=[on_host(doc, "sglang-fleet-2", CLASS_A, 0.25, 0.03)])))}  # fmt: skip
    assert cells[(60, 1)] == pytest.approx(120.0)  # the plots draw the corrected figures too
    # an offset without an uncertainty corrects the figure and leaves its CV; no offset leaves both as measured
    row = _row(make_run, on_host(doc, "sglang-fleet-2", CLASS_A, -0.2))
    assert row["single_stream_tps"] == pytest.approx(187.5) and row["single_stream_cv"] == pytest.approx(0.04)
    row = _row(make_run, on_host(doc, "sglang-fleet-2", CLASS_A, None, 0.03))
    assert row["single_stream_tps"] == 150 and row["single_stream_cv"] == pytest.approx(0.04)
    assert row["host_corrected"] is False and "no offset: figures as measured" in row["host_text"]


def test_a_one_host_result_gives_todays_row_csv_and_summary(make_run: Callable[..., Path]) -> None:
    run_dir = make_run()
    run = tables.load_run(run_dir)
    row = tables.row(run, run.results[2])
    assert row["label"] == "ddtree-b8-t4-w2048-bs8"
    assert (row["single_stream_tps"], row["aggregate_tps"], row["long_context_tps"]) == (150.0, 790.0, 90.0)
    assert (row["single_stream_cv"], row["aggregate_cv"], row["long_context_cv"]) == (0.01, 0.01, 0.01)
    assert row["host"] is None and row["host_class"] is None and row["host_offset"] is None
    assert row["attempts"] == 0 and row["attempt_list"] == [] and row["host_corrected"] is False
    paths = build_report(run_dir)
    header = paths["summary_csv"].read_text().splitlines()[0]
    assert header == ",".join(tables.CSV_COLUMNS)
    md = paths["summary_md"].read_text()
    for fleet_only in ("fleet", "offset", "measured again", "| config | sampling | status |"):
        assert (fleet_only in md) is (fleet_only == "| config | sampling | status |"), fleet_only


def test_no_winner_across_host_classes_and_the_classes_are_named() -> None:
    def row(label: str, tps: float, klass: str | None) -> dict[str, Any]:
        return {"label": label, "status": "ok", "gates_passed": True, "single_stream_tps": tps,
                "single_stream_cv": 0.01, "host": "h-" + label if klass else None, "host_class": klass}  # fmt: skip

    objective = recommend.OBJECTIVES[0]
    winner = recommend.pick(objective, [row("a", 100, CLASS_A), row("b", 150, CLASS_B), row("c", 90, CLASS_A)])
    assert winner.label is None and winner.value is None and winner.eligible == 3
    assert winner.note == (
        f"no winner: eligible configs ran on hosts of different classes ({CLASS_B}, {CLASS_A}); "
        "their figures are not comparable"
    )
    mixed = recommend.pick(objective, [row("a", 100, CLASS_A), row("b", 150, None)])
    assert mixed.label is None and f"({CLASS_A}, no host class)" in mixed.note
    # one class: ranked as usual
    assert recommend.pick(objective, [row("a", 100, CLASS_A), row("c", 90, CLASS_A)]).label == "a"
    assert recommend.pick(objective, [row("a", 100, None), row("c", 90, None)]).label == "a"


def test_the_offset_decides_the_ranking_within_a_class(make_run: Callable[..., Path]) -> None:
    # b8 measured faster, but on a host 20% faster than its class: corrected, b4 wins single-stream
    docs = [
        on_host(result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4), single=130), "fleet-2", CLASS_A, 0.20, 0.005),
        on_host(result("ddtree-b4-t4-w2048-bs8", ddtree(4, 4), single=120), "fleet-1", CLASS_A, 0.0, 0.005),
    ]
    winners = recommend.recommend(tables.rows(tables.load_run(make_run(results=docs))))
    single = next(w for w in winners if w.objective.key == "single_stream")
    assert single.label == "ddtree-b4-t4-w2048-bs8" and single.value == pytest.approx(120.0)
    assert single.runner_up_value == pytest.approx(130 / 1.2)


def _class_results(klass: str, hosts: tuple[str, str]) -> list[dict[str, Any]]:
    docs = standard_results()[:4]
    out = []
    for i, doc in enumerate(docs):
        attempts = None
        if i == 2:  # ddtree-b8: its first host was lost; measured again on the second
            attempts = [{"host": hosts[0], "cause": LOST, "at": "2026-12-02T20:01:02+00:00",
                         "failure": {"class": "failed_to_start", "reason": "the host stopped answering"}}]  # fmt: skip
        out.append(on_host(doc, hosts[1] if i >= 2 else hosts[0], klass, 0.02 if i >= 2 else -0.01, 0.004,
                           attempts=attempts))
    return out


def _host(klass: str, status: str, cause: str | None, offset: float | None, configs: list[str],
          **extra: Any) -> dict[str, Any]:  # fmt: skip
    block = None if offset is None else {"offset": offset, "uncertainty": 0.004, "cells": 3, "flagged": False,
                                         "reason": f"offset {offset:+.1%} within 5% of the class median"}  # fmt: skip
    return {"class": klass, "status": status, "cause": cause, "offset": block, "configs": configs,
            "restore": {"status": "ok", "reason": None}, "endpoint": "http://127.0.0.1:30001", **extra}  # fmt: skip


def make_fleet(root: Path) -> Path:
    """Two classes; in A a host lost mid-run (its config measured again), a flagged host; a refused host."""
    run = root / "fleet-run"
    write_run(run / CLASS_A, _class_results(CLASS_A, ("sglang-fleet-1", "sglang-fleet-2")))
    write_run(run / CLASS_B, _class_results(CLASS_B, ("sglang-fleet-3", "sglang-fleet-3")))
    labels = [d["label"] for d in standard_results()[:4]]
    flagged = _host(CLASS_A, "flagged", "offset +9.0% beyond the 5% limit", 0.09, [])
    flagged["offset"].update(flagged=True, reason="offset +9.0% beyond 5% of the class median")
    refused = _host(CLASS_B, "refused", "lease held by another run: sweep 20261201-x on ctl-7", None, [],
                    restore=None)  # fmt: skip
    fleet = {
        "schema": 1, "run_id": "fleet-run", "simulated": True, "inventory": "tests/fleet/inventory",
        "offset_limit": 0.05, "reference": {"label": "baseline", "config": {"algorithm": "none"}},
        "classes": {
            CLASS_A: {"info": {"gpu_model": "NVIDIA H200", "gpu_count": 8, "driver": "580.95", "toolkit": "13.0",
                               "sglang": "0.5.23", "series": "s1a2b3c"}, "dir": CLASS_A,
                      "hosts": ["sglang-fleet-1", "sglang-fleet-2", "sglang-fleet-5"]},
            CLASS_B: {"info": {"gpu_model": "NVIDIA B300", "gpu_count": 8, "driver": "580.95", "toolkit": "13.0",
                               "sglang": "0.5.23", "series": "s1a2b3c"}, "dir": CLASS_B,
                      "hosts": ["sglang-fleet-3", "sglang-fleet-4"]},
        },
        "hosts": {
            "sglang-fleet-1": _host(CLASS_A, "excluded", f"taken out: {LOST}", -0.01, labels[:2],
                                    restore={"status": "skipped", "reason": "host unreachable"}),
            "sglang-fleet-2": _host(CLASS_A, "active", None, 0.02, labels[2:]),
            "sglang-fleet-5": flagged,
            "sglang-fleet-3": _host(CLASS_B, "active", None, 0.0, labels),
            "sglang-fleet-4": refused,
        },
        "events": [
            {"at": "2026-12-02T20:01:02+00:00", "host": "sglang-fleet-1", "what": f"taken out: {LOST}"},
            {"at": "2026-12-02T20:01:03+00:00", "host": "sglang-fleet-1",
             "what": "ddtree-b8-t4-w2048-bs8 re-queued to another host of the class"},
        ],
        "wall_s": 321.5,
    }  # fmt: skip
    (run / "fleet.json").write_text(json.dumps(fleet), encoding="utf-8")
    (run / "state.json").write_text(json.dumps({"status": "complete"}), encoding="utf-8")
    return run


def test_fleet_md_names_the_classes_hosts_offsets_refusals_and_events(tmp_path: Path) -> None:
    run = make_fleet(tmp_path)
    assert is_fleet_run(run) and not is_fleet_run(run / CLASS_A)
    paths = build_fleet_report(run)
    md = paths["fleet_md"].read_text()
    assert md.startswith("# SIMULATED fleet sweep report: fleet-run\n")
    assert "SIMULATED, sim-speed x1: figures are model outputs x1" in md
    for klass in (CLASS_A, CLASS_B):
        assert f"## Class {klass}" in md and f"[{klass}/summary.md]({klass}/summary.md) (4 configs)" in md
        assert (run / klass / "summary.md").is_file() and paths[f"{klass}/summary_md"] == run / klass / "summary.md"
    assert "| GPU | NVIDIA H200 x 8 |" in md and "| GPU | NVIDIA B300 x 8 |" in md
    assert f"| sglang-fleet-1 | excluded | taken out: {LOST} | -1.0% ± 0.4% (3 cells) | no |" in md
    assert "| sglang-fleet-1 | excluded |" in md and "| skipped: host unreachable |" in md
    assert ("| sglang-fleet-5 | flagged | offset +9.0% beyond the 5% limit | +9.0% ± 0.4% (3 cells) "
            "| yes: offset +9.0% beyond 5% of the class median | none | ok |") in md  # fmt: skip
    section_b = md.split(f"## Class {CLASS_B}")[1].split("## Hosts refused")[0]
    assert "sglang-fleet-4" not in section_b  # a refused host is listed with the refused ones only
    refused = md.split("## Hosts refused at the start")[1].split("## Events")[0]
    assert f"| sglang-fleet-4 | {CLASS_B} | lease held by another run: sweep 20261201-x on ctl-7 |" in refused
    assert "| sglang-fleet-1 | ddtree-b8-t4-w2048-bs8 re-queued to another host of the class |" in md
    assert "| offset limit | 5.0%: a host further off is flagged |" in md and "| wall time | 321.5 s |" in md
    summary = (run / CLASS_A / "summary.md").read_text()
    assert "[fleet report](../fleet.md)" in summary and "corrected by that host's offset" in summary
    assert "| ddtree-b8-t4-w2048-bs8 (SIMULATED x1) | sglang-fleet-2 (offset +2.0% ± 0.4%) |" in summary
    assert f"- ddtree-b8-t4-w2048-bs8: sglang-fleet-1 ({LOST}); counted on sglang-fleet-2" in summary
    rows = list(csv.DictReader(io.StringIO((run / CLASS_A / "summary.csv").read_text())))
    b8 = next(r for r in rows if r["label"] == "ddtree-b8-t4-w2048-bs8")
    assert (b8["host"], b8["host_class"], b8["attempts"], b8["single_stream_tps_raw"]) == (
        "sglang-fleet-2", CLASS_A, "1", "150")
    assert float(b8["single_stream_tps"]) == pytest.approx(150 / 1.02, rel=1e-3)


def test_fleet_md_says_not_measured_never_a_figure_and_no_results_yet(tmp_path: Path) -> None:
    run = make_fleet(tmp_path)
    fleet = json.loads((run / "fleet.json").read_text())
    fleet["simulated"] = False
    fleet["hosts"]["sglang-fleet-2"]["offset"] = {"host": "sglang-fleet-2", "offset": None, "uncertainty": None,
                                                   "cells": 0, "flagged": True, "reason": "reference config failed"}
    fleet["wall_s"] = None
    (run / "fleet.json").write_text(json.dumps(fleet))
    for doc in (run / CLASS_B / "configs").glob("*.json"):
        doc.unlink()
    md = build_fleet_report(run)["fleet_md"].read_text()
    assert md.startswith("# Fleet sweep report: fleet-run\n") and "SIMULATED" not in md.split("## Class")[0]
    assert "| sglang-fleet-2 | active | - | not measured: reference config failed |" in md
    assert "| report | none: no config of this class finished |" in md and "| wall time | not finished |" in md
    assert "None" not in md and "nan" not in md


def test_the_report_cli_builds_the_fleet_report_for_a_fleet_run(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    run = make_fleet(tmp_path)
    assert main([str(run)]) == ExitCode.OK
    assert (run / "fleet.md").is_file() and (run / CLASS_A / "summary.md").is_file()
    assert (run / CLASS_B / "plots" / "pareto.png").is_file()
    manifest = (run / "MANIFEST.sha256").read_text()
    assert " fleet.md\n" in manifest and f" {CLASS_A}/summary.md\n" in manifest
    one_host = make_run("one-host")
    assert main([str(one_host)]) == ExitCode.OK
    assert not (one_host / "fleet.md").exists() and (one_host / "summary.md").is_file()
    (run / "fleet.json").write_text("{not json")
    assert main([str(run)]) == ExitCode.USAGE
