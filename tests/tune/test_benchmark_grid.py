"""The tuner's benchmarks: the measured grid's own one-pass pick (benchmarks/tune_vs_grid.py) is judged on the truth,
like every winner; the model harness (benchmarks/tune_search_model.py) reads the model over the generation; the
replay (benchmarks/tune_replay.py) answers a restart from a kept grid as the engine would."""

from __future__ import annotations

import random
from pathlib import Path

from benchmarks.tune_replay import ReplayMeasure, measured_pick
from benchmarks.tune_vs_grid import Grid, best_measured, grid_pick, obliged_draw, own_configs, plan_search, truly_best
from repro_py.spec_config import validate
from repro_py.sweep.grid import PlannedConfig
from repro_py.tune.objectives import make_objectives
from repro_py.tune.projection import projected_values
from tests.tune.conftest import MEDIUM_SPACE, make_loop
from tests.tune.fakes import ModelMeasure, generation, true_tps, true_tps_over_generation

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


async def test_a_replayed_restart_reads_the_kept_first_pass_at_the_full_rung_and_projects_from_a_short_one(
    tmp_path: Path,
) -> None:
    # a kept grid with no noise in it: the replay's full rung reads the first pass's mean; its screen is built as the
    # benchmark client writes a repeat (time to first token, then one token every t), so the ladder's projection to
    # the full length reads the same figure, save the model's change of the time per token over the length
    search = make_loop(tmp_path, MEDIUM_SPACE).search
    (obj,) = make_objectives(["single-stream"])
    kept, other = "ddtree-b5-t1-wnone-bs8", "ddtree-b6-t1-wnone-bs8"
    g = Grid({obj.key: {kept: [100.0, 100.0, 100.0]}}, {obj.key: {}}, distinct=1, configs=1, wall_s=0.0,
             remeasure_wall_s=0.0)  # fmt: skip
    replay = ReplayMeasure(g, {obj.key: {kept: 5.0}}, (obj,), search, seed="test", full=512)
    by_label = search.space.by_label()
    cfg = by_label[kept]
    full = replay.cell(cfg, 60, 1, 3, 512)
    # (the time to first token varies by 5% per repeat, as the model harness's does: 0.01% of a 5.1 s repeat)
    assert all(abs(r["output_tps"] / 100.0 - 1.0) < 1e-3 for r in full["repeats"]), full["repeats"]
    assert all(abs(r["ttft_ms"]["p50"] - 5.0) < 1.0 for r in full["repeats"])
    screen = replay.cell(cfg, 60, 1, 3, 64)
    projected = projected_values(screen, 64, 512)
    assert projected is not None
    model = generation(cfg, 60, 1, 512)[0] / generation(cfg, 60, 1, 64)[0]
    for value in projected:
        assert abs(value / (100.0 * model) - 1.0) < 0.01, (value, model)
    # a config the grid did not pass fails its gates; the kept one passes
    assert (await replay.gates(None, by_label[other], None))["passed"] is False  # type: ignore[arg-type]
    assert (await replay.gates(None, cfg, None))["passed"] is True  # type: ignore[arg-type]


def test_the_optimums_selection_bias_is_the_best_mean_above_the_leader_chosen_and_valued_on_separate_remeasures() -> (
    None
):
    # two equal configs, each lucky in one re-measure: the best mean (103) is the luck of the draw; chosen on one
    # re-measure and valued on the other each reads 100, so the optimum stands 3% above what the best config is worth
    g = grid(
        {"a": [100.0] * 3, "b": [100.0] * 3, "c": [90.0] * 3},
        {"a": [[106.0] * 3, [100.0] * 3], "b": [[100.0] * 3, [104.0] * 3], "c": [[90.0] * 3, [90.0] * 3]},
    )
    bias = g.selection_bias(KEY)
    assert bias is not None and abs(bias - 0.03) < 1e-9
    # a leader ahead in both re-measures: no luck to remove
    clear = grid({"a": [100.0] * 3, "b": [95.0] * 3}, {"a": [[101.0] * 3, [99.0] * 3], "b": [[95.0] * 3] * 2})
    assert clear.selection_bias(KEY) == 0.0
    assert grid({"a": [100.0] * 3}, {"a": [[100.0] * 3] * 2}).selection_bias(KEY) is None


def test_the_tuners_own_configs_are_the_budget_less_the_baseline_the_current_config_twice_and_the_restore(
    tmp_path: Path,
) -> None:
    objective = make_objectives([KEY])[0]
    _, search = plan_search(tmp_path, "S", objective, max_tokens=512)
    assert own_configs(search, 9) == 5  # S has the baseline; the current config is restarted twice; one restore
    # a gated config takes two restarts (its lossless gate's own): 13 less 2 + 3 + 1 leaves 7, three configs
    assert own_configs(search, 13, per_config=2) == 3
    assert own_configs(search, 3) == 0
    assert not (tmp_path / "tune-S-single-stream-0").exists()  # a plan and a search, no run directory


def test_random_search_bound_as_the_tuner_is_measures_the_current_config_and_as_many_draws_as_its_own_configs() -> (
    None
):
    others = [f"c{i}" for i in range(10)]
    for seed in range(20):
        drawn = obliged_draw("current", others, 4, random.Random(seed))
        assert drawn[0] == "current" and len(drawn) == 5 and len(set(drawn)) == 5 and set(drawn[1:]) <= set(others)
    assert sorted(obliged_draw("current", others[:2], 4, random.Random(0))) == ["c0", "c1", "current"]


def test_the_truly_best_located_are_the_current_config_and_the_best_truths_picked_on_their_one_pass() -> None:
    # truths (the re-measures): b 100, c 99, a 96; d and e measured once. "a" led the pass by luck and is not among
    # the truly best two; "c" read above "b" in the pass, so the pick of the truly best is "c" (within 2%)
    g = grid(
        {"cur": [90.0] * 3, "a": [104.0] * 3, "b": [100.0] * 3, "c": [101.0] * 3, "d": [80.0] * 3, "e": [85.0] * 3},
        {"a": [[96.0] * 3] * 2, "b": [[100.0] * 3] * 2, "c": [[99.0] * 3] * 2},
    )
    best = truly_best(g, KEY, "cur", 2)
    assert best == ["cur", "b", "c"]
    assert best_measured(g, KEY, best) == "c"
    assert g.judge(KEY, "c", 0.9)[1] and not g.judge(KEY, "a", 0.9)[1]
    # drawn around the re-measures (--center pooled) a pick can differ from the pass's; never outside the labels
    picks = {measured_pick(g, best, KEY, random.Random(i), pooled=True) for i in range(50)}
    assert picks <= {"cur", "b", "c"} and {"b", "c"} <= picks
