"""The tuner's benchmarks: the measured grid's own one-pass pick (benchmarks/tune_vs_grid.py) is judged on the truth,
like every winner; the model harness (benchmarks/tune_search_model.py) reads the model over the generation."""

from __future__ import annotations

from benchmarks.tune_vs_grid import Grid, grid_pick
from repro_py.spec_config import validate
from repro_py.sweep.grid import PlannedConfig
from tests.tune.fakes import ModelMeasure, true_tps, true_tps_over_generation

KEY = "single-stream"


def grid(first: dict[str, list[float]], again: dict[str, list[list[float]]]) -> Grid:
    return Grid({KEY: first}, {KEY: again}, distinct=len(first), configs=len(first), wall_s=0.0, remeasure_wall_s=0.0)


def test_the_grids_own_pick_is_the_best_of_its_one_pass_and_can_miss_the_optimum_its_remeasures_show() -> None:
    # "a" led the one pass by luck; its two re-measures (the truth) put it 4% below "b"
    g = grid(
        {"a": [103.0, 104.0, 103.0], "b": [100.0, 101.0, 100.0], "c": [90.0, 91.0, 90.0]},
        {"a": [[96.0, 96.5, 95.5], [96.0, 95.5, 96.5]], "b": [[100.0, 100.5, 99.5], [100.0, 99.5, 100.5]]},
    )
    assert grid_pick(g, KEY) == "a"
    assert g.optimum(KEY)[0] == "b"
    ratio, within, _ = g.judge(KEY, "a", 0.9)
    assert ratio is not None and abs(ratio + 0.04) < 1e-9 and not within


def test_the_grids_own_pick_that_is_the_optimum_is_a_hit_and_an_empty_grid_picks_nothing() -> None:
    g = grid({"a": [100.0, 100.0, 101.0], "b": [97.0, 97.0, 98.0]}, {"a": [[100.0, 100.0, 100.0]] * 2})
    assert grid_pick(g, KEY) == "a"
    assert g.judge(KEY, "a", 0.9) == (0.0, True, True)
    assert grid_pick(grid({}, {}), KEY) is None


def test_the_model_harness_over_the_generation_sees_a_draft_window_the_sequence_outgrows() -> None:
    # benchmarks/tune_search_model.py reads the model over the generation (as the simulated engine runs it): a 128
    # window costs acceptance once the sequence passes it; at the prompt's length it reads as a full cache
    short = PlannedConfig(validate({"algorithm": "ddtree", "budget": 5, "topk": 2, "block_size": 8, "window": 128}))
    full = PlannedConfig(validate({"algorithm": "ddtree", "budget": 5, "topk": 2, "block_size": 8, "window": None}))
    assert true_tps(short, 60, 32) == true_tps(full, 60, 32)
    assert true_tps_over_generation(short, 60, 32, 512) < 0.97 * true_tps_over_generation(full, 60, 32, 512)
    cells = {
        cfg.label: ModelMeasure(0, cv_at_512=0.0, restart_cv=0.0, over_generation=True).cell(cfg, 60, 32, 1, 512)
        for cfg in (short, full)
    }
    accept = {label: cell["repeats"][0]["accept_length"] for label, cell in cells.items()}
    assert accept[short.label] < 0.97 * accept[full.label], accept
