"""The report names the sampling setting of its figures in every table and plot title, and never compares
figures measured at two settings: one set of winners and plots per setting."""

from __future__ import annotations

import copy
import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from repro_py.report import recommend, tables
from repro_py.report.render import build_report
from tests.report.conftest import standard_results
from tests.report.test_report import _titles

HOT = {"temperature": 0.7, "top_p": 0.95}
HOT_TEXT = "T=0.7, top_p=0.95"
GREEDY_TEXT = "T=0 (greedy), top_p=1"
MAIN_TITLES = ("per config", "vs budget", "vs aggregate")


def _sampled(doc: dict[str, Any], sampling: dict[str, float]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["sampling"] = dict(sampling)
    out["label"] = f"{doc['label']}-temp{sampling['temperature']:g}-topp{sampling['top_p']:g}"
    return out


def test_a_run_at_one_sampling_setting_names_it_in_every_table_and_plot_title(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _titles(monkeypatch)
    paths = build_report(make_run(results=[_sampled(r, HOT) for r in standard_results()]))
    titles = [t for t in seen if any(key in t for key in MAIN_TITLES)]
    assert len(titles) == 3 and all(f"\nsampling {HOT_TEXT}\n" in t for t in titles), titles
    md = paths["summary_md"].read_text()
    assert f"| sampling | {HOT_TEXT} |" in md and GREEDY_TEXT not in md and "MIXED sampling" not in md
    results_rows = [line for line in md.splitlines() if line.startswith("| ddtree-") or line.startswith("| baseline")]
    assert results_rows and all(HOT_TEXT in line for line in results_rows), results_rows
    assert md.count(f"Sampling {HOT_TEXT}:") == 2  # the recommendation and the plots
    rows = list(csv.DictReader(io.StringIO(paths["summary_csv"].read_text())))
    assert {(r["temperature"], r["top_p"]) for r in rows} == {("0.7", "0.95")}


def test_two_sampling_settings_are_never_compared(
    make_run: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    greedy = standard_results()
    hot = [_sampled(r, HOT) for r in standard_results()]
    hot[2]["bench"]["cells"][0]["median"]["output_tps"] = 10_000.0  # the hot run's b8 single stream: far ahead
    seen = _titles(monkeypatch)
    paths = build_report(make_run(results=greedy + hot))
    run = tables.load_run(paths["summary_md"].parent)
    assert [s.text for s in run.samplings] == [GREEDY_TEXT, HOT_TEXT]
    winners = recommend.recommend(tables.rows(run))
    assert [w.sampling for w in winners] == [GREEDY_TEXT] * 3 + [HOT_TEXT] * 3
    by = {(w.sampling, w.objective.key): w for w in winners}
    assert by[(GREEDY_TEXT, "single_stream")].label == "ddtree-b8-t4-w2048-bs8"  # the hot figure is not its rival
    assert by[(GREEDY_TEXT, "single_stream")].runner_up == "ddtree-b4-t4-w2048-bs8"
    assert by[(HOT_TEXT, "single_stream")].label == "ddtree-b8-t4-w2048-bs8-temp0.7-topp0.95"
    # one set of plots per setting, each title naming its own setting only
    for name in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert paths[name].name == f"{name}.png"
        assert paths[f"{name}-temp0.7-topp0.95"].is_file()
    titles = [t for t in seen if any(key in t for key in MAIN_TITLES)]
    assert len(titles) == 6 and not any("MIXED sampling" in t for t in titles)
    assert sum(f"\nsampling {GREEDY_TEXT}\n" in t for t in titles) == 3
    assert sum(f"\nsampling {HOT_TEXT}\n" in t for t in titles) == 3
    hot_labels = {r["label"] for r in hot}
    legend = [t for t in seen if t.split(" ")[0] in hot_labels or t.split(" (")[0] in hot_labels]
    assert legend  # the hot configs are drawn, on their own plots
    md = paths["summary_md"].read_text()
    assert f"| sampling | {GREEDY_TEXT}; {HOT_TEXT} (MIXED:" in md
    assert md.count(f"Sampling {GREEDY_TEXT}:") == 2 and md.count(f"Sampling {HOT_TEXT}:") == 2
    assert "plots/pareto-temp0.7-topp0.95.png" in md and "plots/pareto.png" in md
