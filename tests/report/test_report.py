from __future__ import annotations

import csv
import io
import json
import struct
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from repro_py.exitcodes import ExitCode
from repro_py.report import recommend, tables
from repro_py.report.cli import main
from repro_py.report.plots import pareto_front
from repro_py.report.render import build_report, md_cell
from tests.report.conftest import ddtree, result, standard_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_text(path: Path) -> dict[str, str]:
    """A PNG's tEXt chunks (validates the chunk CRCs on the way)."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    pos, out, kinds = 8, {}, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc
        kinds.append(kind)
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode()] = value.decode("latin-1")
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    return out


def test_winners_respect_the_gates(make_run: Callable[..., Path]) -> None:
    run = tables.load_run(make_run())
    winners = {w.objective.key: w for w in recommend.recommend(tables.rows(run))}
    # b16 is fastest everywhere but garbles; b48 never started
    assert winners["single_stream"].label == "ddtree-b8-t4-w2048-bs8"
    assert winners["throughput"].label == "ddtree-b4-t4-w2048-bs8"
    assert winners["long_context"].label == "ddtree-b32-t8-w2048-bs8"
    for w in winners.values():
        assert w.label not in {"ddtree-b16-t4-w2048-bs8", "ddtree-b48-t8-w2048-bs8"}
        assert "ddtree-b16-t4-w2048-bs8 (gate_failed)" in w.excluded
        assert "ddtree-b48-t8-w2048-bs8 (failed_to_start)" in w.excluded


def test_close_race_is_called_within_spread_and_noisy_winner_flagged() -> None:
    table = [
        {"label": "a", "status": "ok", "gates_passed": True, "single_stream_tps": 150.0, "single_stream_cv": 0.08},
        {"label": "b", "status": "ok", "gates_passed": True, "single_stream_tps": 145.0, "single_stream_cv": 0.02},
    ]
    w = recommend.pick(recommend.OBJECTIVES[0], table)
    assert w.label == "a" and "within measured spread of b" in w.note and "noisy" in w.note
    none = recommend.pick(recommend.OBJECTIVES[0], [{"label": "x", "status": "failed", "failure_class": "gate_failed"}])
    assert none.label is None and "no config passed the gates" in none.note


def test_summary_lists_failures_with_reasons_and_is_marked_simulated(make_run: Callable[..., Path]) -> None:
    run_dir = make_run()
    paths = build_report(run_dir)
    md = paths["summary_md"].read_text()
    assert md.startswith("# SIMULATED sweep report")
    assert "> **SIMULATED**" in md
    assert md.rstrip().endswith(
        "*SIMULATED run (SIMULATED, sim-speed x1: figures are model outputs x1): not a measurement of hardware.*"
    )
    greedy = "T=0 (greedy), top_p=1"
    assert f"| ddtree-b16-t4-w2048-bs8 | {greedy} | gate_failed | lossless: 6 of 6 \\| prompts diverge |" in md
    oom = "the engine exited during startup: CUDA OOM"
    assert f"| ddtree-b48-t8-w2048-bs8 | {greedy} | failed_to_start | {oom} |" in md
    assert "torch.OutOfMemoryError: CUDA out of memory" in md  # the journal excerpt
    assert "| single-stream latency | ddtree-b8-t4-w2048-bs8 | 150.0 |" in md
    assert "| throughput at high concurrency | ddtree-b4-t4-w2048-bs8 | 897.0 |" in md
    assert "| long context | ddtree-b32-t8-w2048-bs8 | 120.0 |" in md
    assert "(plots/pareto.png)" in md

    rows = list(csv.DictReader(io.StringIO(paths["summary_csv"].read_text())))
    assert len(rows) == 6 and all(r["engine"] == "SIMULATED" for r in rows)
    failed = {r["label"]: r for r in rows if r["status"] == "failed"}
    assert failed["ddtree-b48-t8-w2048-bs8"]["failure_class"] == "failed_to_start"
    assert failed["ddtree-b48-t8-w2048-bs8"]["failure_reason"].startswith("the engine exited")

    for name in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        meta = png_text(paths[name])
        assert meta["Title"] == f"{name} (SIMULATED, sim-speed x1: figures are model outputs x1)"


def _with_speed(doc: dict[str, Any], speed: float) -> dict[str, Any]:
    doc["engine"]["sim_speed"] = speed
    return doc


def _titles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every title, legend label and annotation the plots set (matplotlib's own calls, spied)."""
    seen: list[str] = []

    def spy_on(cls: type, name: str, text_of: Callable[[tuple[Any, ...], dict[str, Any]], object]) -> None:
        orig = getattr(cls, name)

        def spy(self: Any, *a: Any, **kw: Any) -> Any:
            text = text_of(a, kw)
            if isinstance(text, str):
                seen.append(text)
            return orig(self, *a, **kw)

        monkeypatch.setattr(cls, name, spy)

    spy_on(Figure, "suptitle", lambda a, kw: a[0])
    spy_on(Axes, "set_title", lambda a, kw: a[0])
    spy_on(Axes, "annotate", lambda a, kw: a[0])
    for name in ("plot", "scatter", "axhline"):
        spy_on(Axes, name, lambda a, kw: kw.get("label"))
    return seen


def test_sim_speed_is_stated_in_every_plot_title_the_summary_and_the_csv(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    note = "SIMULATED, sim-speed x10: figures are model outputs x10"
    seen = _titles(monkeypatch)
    paths = build_report(make_run(results=[_with_speed(r, 10.0) for r in standard_results()]))
    for name in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert png_text(paths[name])["Title"] == f"{name} ({note})"
    titles = [t for t in seen if "per config" in t or "vs budget" in t or "vs aggregate" in t]
    assert len(titles) == 3 and all(t.endswith("\n" + note) for t in titles), titles
    assert not any("[x10]" in t for t in seen)  # one speed: no per-config speed labels
    md = paths["summary_md"].read_text()
    assert "| engine | SIMULATED, sim-speed x10, version 0.5.23 |" in md
    assert f"> **{note}.**" in md and "MIXED" not in md
    assert "| ddtree-b8-t4-w2048-bs8 (SIMULATED x10) | T=0 (greedy), top_p=1 | ok | pass |" in md
    assert "| ddtree-b48-t8-w2048-bs8 (SIMULATED x10) | T=0 (greedy), top_p=1 | failed_to_start |" in md
    assert "| single-stream latency | ddtree-b8-t4-w2048-bs8 | 150.0 |" in md
    rows = list(csv.DictReader(io.StringIO(paths["summary_csv"].read_text())))
    assert [(r["engine"], r["sim_speed"]) for r in rows] == [("SIMULATED", "10")] * 6
    assert paths["summary_csv"].read_text().startswith("engine,sim_speed,label,")


def test_mixed_sim_speeds_are_never_compared_silently(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a resumed run whose later configs ran at x10: x1 and x10 figures must not be ranked together
    docs = [_with_speed(r, 10.0 if i >= 3 else 1.0) for i, r in enumerate(standard_results())]
    seen = _titles(monkeypatch)
    paths = build_report(make_run(results=docs))
    note = "SIMULATED, MIXED sim-speeds x1/x10: figures are not comparable across speeds"
    for name in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert png_text(paths[name])["Title"] == f"{name} ({note})"
    assert sum(t.endswith("\n" + note) for t in seen) == 3
    assert "ddtree-b8-t4-w2048-bs8 [x1]" in seen and "ddtree-b4-t4-w2048-bs8 [x10]" in seen  # legend entries
    assert "no Pareto front: mixed sim speeds" in seen and "Pareto front" not in seen
    md = paths["summary_md"].read_text()
    assert "**MIXED sim speeds**: the results were produced at x1, x10" in md
    assert "| ddtree-b8-t4-w2048-bs8 (SIMULATED x1) |" in md and "| ddtree-b4-t4-w2048-bs8 (SIMULATED x10) |" in md
    winners = recommend.recommend(tables.rows(tables.load_run(paths["summary_md"].parent)))
    assert len(winners) == 3
    for w in winners:
        assert w.label is None and w.value is None
        assert w.note == (
            "no winner: eligible configs ran at different sim speeds (x1, x10); their figures are not comparable"
        )
    assert "| single-stream latency | - | - | - | no winner: eligible configs ran at different sim speeds" in md
    rows = list(csv.DictReader(io.StringIO(paths["summary_csv"].read_text())))
    assert [r["sim_speed"] for r in rows] == ["1", "1", "1", "10", "10", "10"]


def test_real_run_has_no_simulated_mark(make_run: Callable[..., Path]) -> None:
    paths = build_report(make_run("real-run", simulated=False))
    assert "SIMULATED" not in paths["summary_md"].read_text()
    assert "SIMULATED" not in paths["summary_csv"].read_text()
    assert "SIMULATED" not in png_text(paths["pareto"])["Title"]


def test_report_cli_rebuilds_from_files_only_and_seals(make_run: Callable[..., Path]) -> None:
    run_dir = make_run()
    assert main([str(run_dir)]) == ExitCode.OK
    assert (run_dir / "summary.md").is_file() and (run_dir / "MANIFEST.sha256").is_file()
    check = subprocess.run(
        ["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], check=False, cwd=run_dir, capture_output=True
    )
    assert check.returncode == 0
    assert main([str(run_dir.parent / "nope")]) == ExitCode.USAGE


def test_interrupted_run_lists_the_unfinished(make_run: Callable[..., Path]) -> None:
    run_dir = make_run(results=[result("baseline", {"algorithm": "none"}, accept=None)])
    plan = (
        (run_dir / "plan.json")
        .read_text()
        .replace('"configs": [', '"configs": [{"label": "ddtree-b8-t4-w2048-bs8", "config": {}}, ')
    )
    (run_dir / "plan.json").write_text(plan)
    md = build_report(run_dir)["summary_md"].read_text()
    assert "Not finished" in md and "ddtree-b8-t4-w2048-bs8" in md


def test_a_result_off_the_schema_is_refused_by_name_and_never_counted(
    make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4), single=900)
    del bad["gates"]
    run_dir = make_run(results=[result("baseline", {"algorithm": "none"}, accept=None), bad])
    run = tables.load_run(run_dir)
    assert [r["label"] for r in run.results] == ["baseline"]
    bad_path = run_dir / "configs" / "ddtree-b8-t4-w2048-bs8.json"
    assert run.refused == [f"{bad_path}: the required key 'gates' is missing (schema 1)"]
    assert main([str(run_dir), "--no-manifest"]) == ExitCode.OK
    assert f"result refused (not counted): {bad_path}: the required key 'gates'" in capsys.readouterr().err
    md = (run_dir / "summary.md").read_text()
    assert "Result files refused" in md and "ddtree-b8-t4-w2048-bs8.json: the required key 'gates'" in md
    assert "900" not in md  # its figures are not in any table


def test_empty_and_odd_inputs_still_render(make_run: Callable[..., Path]) -> None:
    failed_only = [
        result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4),
               failure={"class": "failed_to_start", "reason": "boom\nline two", "journal": []}),
    ]  # fmt: skip
    paths = build_report(make_run("odd", results=failed_only))
    md = paths["summary_md"].read_text()
    assert "| ddtree-b8-t4-w2048-bs8 | T=0 (greedy), top_p=1 | failed_to_start | boom line two |" in md
    assert "no config passed the gates" in md
    for name in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        png_text(paths[name])


def test_pareto_front_and_md_cell() -> None:
    pts = [("a", 1.0, 5.0), ("b", 2.0, 4.0), ("c", 1.5, 3.0), ("d", 3.0, 1.0)]
    assert [p[0] for p in pareto_front(pts)] == ["a", "b", "d"]
    assert md_cell("x | y\nz") == "x \\| y z"
    assert md_cell(None) == "-"


def test_the_sandbox_mode_and_the_lossless_verdicts_are_shown(make_run: Callable[..., Path]) -> None:
    """A run judged with --allow-unisolated says so in its header and per config; lossless verdicts show."""
    docs = standard_results()
    for doc in docs:
        gates = doc["gates"]
        gates["coding"].update(isolation_mode="none", pass_count=14, total=14)
        gates["lossless"].update(verdict="lossless" if gates["lossless"]["passed"] else "diverged",
                                 server_log={"scanned": True, "passed": True})
    docs[0]["gates"]["lossless"]["verdict"] = "reference"
    run = make_run(results=docs)
    plan = json.loads((run / "plan.json").read_text())
    plan["sandbox"] = {"mode": "none", "description": "none (UNISOLATED ...)", "unisolated_allowed": True}
    (run / "plan.json").write_text(json.dumps(plan))
    summary = build_report(run)["summary_md"].read_text()
    assert "| coding sandbox | none (**UNISOLATED**, allowed by `--allow-unisolated`" in summary
    row = "| ddtree-b8-t4-w2048-bs8 | T=0 (greedy), top_p=1 | pass | lossless | - | clean | 14/14 | none (UNISOLATED) |"
    assert row in summary  # a result without a sampled gate: "-"
    assert "| baseline | T=0 (greedy), top_p=1 | pass | reference | - | clean | 14/14 | none (UNISOLATED) |" in summary
    rows = {r["label"]: r for r in csv.DictReader(io.StringIO((run / "summary.csv").read_text()))}
    assert rows["ddtree-b8-t4-w2048-bs8"]["sandbox"] == "none"
    assert rows["ddtree-b16-t4-w2048-bs8"]["lossless_verdict"] == "diverged"
