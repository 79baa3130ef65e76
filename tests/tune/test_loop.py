"""The tuning loop over fakes: the sweep's per-config path and results, budgets, gates, SLOs, Ctrl-C + resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from repro_py import manifest
from repro_py.report.render import build_report
from repro_py.sweep.grid import PlannedConfig
from repro_py.tune import proposals, verdict
from repro_py.tune.ladder import make_ladder
from repro_py.tune.loop import Budget, TuneLoop
from repro_py.tune.outcome import search_document
from repro_py.tune.records import Proposal
from repro_py.tune.search import Search
from tests.sweep.conftest import FakeReconfigurer
from tests.tune.conftest import MEDIUM_SPACE, SMALL_SPACE, fixed_cell, make_loop
from tests.tune.fakes import ModelMeasure, true_tps, true_tps_over_generation


async def test_every_restart_is_a_normal_sweep_result_that_the_report_and_manifest_read(tmp_path: Path) -> None:
    rec = FakeReconfigurer()
    loop = make_loop(tmp_path, reconfigurer=rec, budget=Budget(max_restarts=10))
    outcome = await loop.run()
    # every restart through the reconfigurer, counted (a gated config's lossless gate restart too); a config
    # starts only when the two restarts it may take fit next to the final restore
    assert not outcome.interrupted and outcome.restarts == len(rec.calls) <= 10
    used = outcome.restarts - 1
    assert outcome.stop_reason == (
        f"restart budget reached: {used} of 10 restarts used plus the final restore; a config may take 2 "
        "(its lossless gate's own restart)"
    )
    assert used + 1 + 2 > 10  # no room left for one more config
    assert rec.restores == [False] * used + [True] and rec.calls[-1] == "ddtree-b8-t4-w2048-bs8"
    assert rec.calls[:3] == ["baseline", "baseline", "ddtree-b8-t4-w2048-bs8"]  # the reference, then the config to beat
    docs = {d["label"]: d for d in loop.run_dir.results()}
    assert set(docs) == set(rec.calls[:used])
    for label, doc in docs.items():  # production first; only a gated config gets its gate's own restart
        calls = [det for call, det in zip(rec.calls[:used], rec.deterministic, strict=False) if call == label]
        assert calls == ([False, True] if "lossless_reconfigure" in doc else [False])
        assert ("lossless_reconfigure" in doc) == (doc["gates"].get("skipped") is not True)
    for doc in docs.values():
        assert doc["schema"] == 1 and doc["status"] == "ok" and doc["run_id"] == "run"
        assert set(doc["fingerprint"]) >= {"patch_series_sha256", "lock_sha256", "engine_kind", "host", "config_sha256"}
        assert doc["bench"]["tune"]["rungs"] and doc["bench"]["cells"]
    gated = [d for d in docs.values() if d["gates"].get("passed")]
    skipped = [d for d in docs.values() if d["gates"].get("skipped")]
    assert gated and skipped and len(gated) + len(skipped) == len(docs)
    for doc in skipped:  # dropped configs, never gated; the current config's second restart (gated in its first)
        if doc["label"] == "ddtree-b8-t4-w2048-bs8.r2":
            assert doc["gates"]["reason"].startswith("not gated: restart 2 of ddtree-b8-t4-w2048-bs8")
            assert doc["bench"]["settings"]["tune_rung"] == "full"
            continue
        assert doc["gates"]["reason"].startswith("not gated: dropped before the full measurement")
        assert doc["bench"]["tune"]["rungs"][-1]["decisions"]["single-stream"]["keep"] is False
    plan = json.loads(loop.run_dir.plan.read_text())
    assert [c["label"] for c in plan["configs"]] == list(dict.fromkeys(rec.calls[:used]))
    # the sweep's own report and manifest work on the run unchanged
    build_report(loop.run_dir.path)
    summary = (loop.run_dir.path / "summary.md").read_text()
    assert "| not run |" in summary and f"{len(docs)} of {len(docs)} finished" in summary
    manifest.write(loop.run_dir.path)
    assert manifest.verify(loop.run_dir.path).ok


async def test_the_winner_is_gated_and_a_fast_garbling_config_never_wins(tmp_path: Path) -> None:
    garbler = "ddtree-b5-t1-w2048-bs8"  # the model's fastest single-stream config in this space
    measure = ModelMeasure(1, gate_fail={garbler})
    loop = make_loop(tmp_path, measure=measure, budget=Budget(max_restarts=40))  # a gated config takes two
    await loop.run()
    search = loop.search
    assert garbler in search.records, "the search should reach the fastest config"
    assert search.records[garbler].gates == "FAIL"
    (winner,) = verdict.winners(search)
    assert winner.label not in (None, garbler)
    assert search.records[winner.label].gates == "pass"
    assert set(measure.gate_calls) == {r.label for r in search.records.values() if r.gates in ("pass", "FAIL")}
    # a garbler is never the reference that drops others
    for rec in search.records.values():
        for rung in rec.rungs:
            for decision in rung.decisions.values():
                assert garbler not in str(decision.get("reason")) or decision.get("keep")


async def test_search_finds_the_model_optimum_in_a_fraction_of_the_space(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, MEDIUM_SPACE, budget=Budget(max_restarts=40), measure=ModelMeasure(3))
    outcome = await loop.run()
    space = loop.search.space
    truth = {c.label: true_tps(c, 60, 1) for c in space.configs}
    (winner,) = verdict.winners(loop.search)
    assert winner.label is not None
    assert truth[winner.label] >= 0.97 * max(truth.values())
    assert outcome.restarts <= 40 < len(space)
    # configs the objective cannot tell apart (a 2048 window and a full cache at a 60-token context) run once
    keys = [proposals.equivalence_key(loop.search, r.cfg) for r in loop.search.records.values() if r.restart == 1]
    assert len(keys) == len(set(keys))


async def test_a_latency_slo_drops_violators_at_the_screen(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, slos=["ttft_p99_ms<=10"], budget=Budget(max_restarts=8))
    await loop.run()
    (winner,) = verdict.winners(loop.search)
    assert winner.label is None
    for rec in loop.search.records.values():
        if rec.cfg.spec.algorithm != "none":
            assert rec.last_rung == "screen"
            assert "violates SLO ttft_p99_ms<=10" in rec.rungs[0].decisions["single-stream"]["reason"]
    loop2 = make_loop(
        tmp_path, slos=["ttft_p99_ms<=1000", "coding_pass_rate>=1"], run="ok", budget=Budget(max_restarts=8)
    )
    await loop2.run()
    assert verdict.winners(loop2.search)[0].label is not None


async def test_a_throughput_floor_is_judged_at_full_length(tmp_path: Path) -> None:
    loop = make_loop(
        tmp_path, objectives=["throughput"], slos=["single_stream_tps>=155"], budget=Budget(max_restarts=8)
    )
    await loop.run()
    search = loop.search
    for rec in search.records.values():
        for rung in rec.rungs:
            if rung.name != "full":
                assert not any(k.startswith("*|") for k in rung.slo_values)  # not at short outputs
    (winner,) = verdict.winners(search)
    if winner.label is not None:
        final = search.records[winner.label].rung("full")
        assert final is not None and sum(final.slo_values["*|single_stream_tps"]) / 3 >= 155


async def test_ctrl_c_then_resume_continues_the_same_search(tmp_path: Path) -> None:
    holder: dict[str, TuneLoop] = {}

    def interrupt_on_fifth(cfg: PlannedConfig, n: int) -> None:
        if n == 5:
            runner = holder["loop"].runner
            assert runner.loop is not None
            runner.loop.call_soon_threadsafe(runner._on_sigint)

    rec = FakeReconfigurer(hook=interrupt_on_fifth)
    loop = make_loop(tmp_path, reconfigurer=rec, measure=ModelMeasure(5), budget=Budget(max_restarts=9))
    holder["loop"] = loop
    outcome = await loop.run()
    assert outcome.interrupted and loop.run_dir.read_state()["status"] == "interrupted"
    done = {d["label"] for d in loop.run_dir.results()}
    assert done == set(rec.calls[:4]) and rec.calls[4] not in done
    before = {label: loop.run_dir.result(label).read_bytes() for label in done}

    rec2 = FakeReconfigurer()
    loop2 = make_loop(tmp_path, reconfigurer=rec2, measure=ModelMeasure(6), budget=Budget(max_restarts=9))
    outcome2 = await loop2.run()
    assert sorted(outcome2.reused) == sorted(done)
    measured2 = [label for label, restore in zip(rec2.calls, rec2.restores, strict=True) if not restore]
    assert set(measured2).isdisjoint(done) and rec2.restores[-1]
    assert measured2[0] == rec.calls[4]  # the interrupted config is proposed again first
    # the first session's four restarts (two configs gated, each with its lossless gate's own) and this one's
    assert outcome2.restarts == 4 + len(rec2.calls) <= 9 and loop2.run_dir.read_state()["status"] == "complete"
    for label, data in before.items():
        assert loop2.run_dir.result(label).read_bytes() == data
    # the rebuilt search carries the earlier decisions
    first = loop2.search.records["ddtree-b8-t4-w2048-bs8"]
    assert first.order == 2 and first.gates == "pass" and first.last_rung == "full"


async def test_failed_starts_are_recorded_and_not_retried(tmp_path: Path) -> None:
    rec = FakeReconfigurer(fail={"ddtree-b8-t4-w2048-bs8": "the engine exited during startup (exit code 1)"})
    loop = make_loop(tmp_path, reconfigurer=rec, budget=Budget(max_restarts=8))
    await loop.run()
    failed = loop.search.records["ddtree-b8-t4-w2048-bs8"]
    assert failed.status == "failed" and failed.failure is not None and "failed_to_start" in failed.failure
    measured = [label for label, restore in zip(rec.calls, rec.restores, strict=True) if not restore]
    assert measured.count("ddtree-b8-t4-w2048-bs8") == 1 and rec.restores[-1]
    doc = search_document(loop.search, stop_reason="x", settings={}, restarts=6)
    entry = next(p for p in doc["path"] if p["label"] == "ddtree-b8-t4-w2048-bs8")
    assert entry["outcome"].startswith("failed: failed_to_start")


async def test_hours_budget(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, budget=Budget(max_hours=1e-9))
    outcome = await loop.run()
    assert outcome.restarts == 1 and outcome.stop_reason.startswith("time budget reached")  # only the restore


def test_judge_keeps_a_config_within_the_noise_and_drops_one_clearly_behind(tmp_path: Path) -> None:
    search = make_loop(tmp_path).search
    from repro_py.tune.records import Proposal  # noqa: PLC0415

    by_label = search.space.by_label()
    for label, values in (
        ("ddtree-b8-t4-w2048-bs8", [100.0, 101.0, 99.0]),
        ("ddtree-b6-t2-w2048-bs8", [96.0, 97.0, 95.0]),  # 4% behind: inside the screen's noise
        ("ddtree-b3-t1-w2048-bs8", [70.0, 71.0, 69.0]),  # 30% behind: clearly
    ):
        search.start(Proposal(by_label[label], "test"))
        search.judge(label, 0, [fixed_cell(values)])
    assert search.records["ddtree-b6-t2-w2048-bs8"].alive == {"single-stream"}
    assert search.records["ddtree-b3-t1-w2048-bs8"].alive == set()
    reason = search.records["ddtree-b3-t1-w2048-bs8"].rungs[0].decisions["single-stream"]["reason"]
    assert reason.startswith("clearly behind ddtree-b8-t4-w2048-bs8")
    # a cell without a valid repeat is no measurement: the objective is dropped with the cell's reason
    search.start(Proposal(by_label["ddtree-b5-t1-w2048-bs8"], "test"))
    search.judge(
        "ddtree-b5-t1-w2048-bs8",
        0,
        [{"context": 60, "concurrency": 1, "status": "error", "reason": "all 1 requests failed", "repeats": []}],
    )
    decision = search.records["ddtree-b5-t1-w2048-bs8"].rungs[0].decisions["single-stream"]
    assert not decision["keep"] and "all 1 requests failed" in decision["reason"]


def test_outcome_document_lists_the_search_path(tmp_path: Path) -> None:
    loop = make_loop(tmp_path, SMALL_SPACE)
    doc = search_document(loop.search, stop_reason="none yet", settings={"a": 1}, restarts=0)
    assert doc["path"] == [] and doc["space_size"] == len(loop.search.space) == 22


def _timed_cell(ttft_ms: float, per_token_ms: float, tokens: int, jitter: tuple[float, ...] = (1.0, 1.01, 0.99)):
    """A cell as the client writes it: each repeat takes the first token's time plus ``tokens - 1`` per-token
    times (the per-token time scaled by one ``jitter`` factor per repeat)."""
    reps = []
    for factor in jitter:
        span = (ttft_ms + (tokens - 1) * per_token_ms * factor) / 1000.0
        reps.append(
            {"output_tps": tokens / span, "wall_s": span, "output_tokens": tokens, "errors": 0, "ok": 1,
             "requests": 1, "ttft_ms": {"p50": ttft_ms, "p99": ttft_ms}, "accept_length": 4.0,
             "itl_chunk_ms": {"p50": 4 * per_token_ms * factor}, "itl_token_ms": {"p50": per_token_ms * factor}}
        )  # fmt: skip
    return {"context": 60, "concurrency": 1, "status": "ok", "median": {"accept_length": 4.0}, "repeats": reps}


def test_a_short_screen_is_judged_on_its_projection_to_the_full_length(tmp_path: Path) -> None:
    """A fast decoder with a slow first token reads 20% low at a 64-token screen and is 33% ahead at 512 tokens:
    judged on raw screen figures it is dropped; projected with its own timing it goes on."""
    from repro_py.tune.records import Proposal  # noqa: PLC0415

    search = make_loop(tmp_path).search
    by_label = search.space.by_label()
    slow, fast = "ddtree-b8-t4-w2048-bs8", "ddtree-b5-t1-w2048-bs8"
    for label, ttft, per_token in ((slow, 100.0, 7.5), (fast, 400.0, 5.0)):
        search.start(Proposal(by_label[label], "test"))
        search.judge(label, 0, [_timed_cell(ttft, per_token, 64)])
    decision = search.records[fast].rungs[0].decisions["single-stream"]
    assert decision["keep"], decision["reason"]
    raw = [search.records[label].rungs[0].measured_tps["single-stream"][0] for label in (fast, slow)]
    assert raw[0] < 0.85 * raw[1]  # as measured, the fast decoder looks clearly behind
    projected = search.records[fast].rungs[0].tps["single-stream"][0]
    assert projected == pytest.approx(512 / (0.4 + 511 * 0.005), rel=1e-6)


async def test_the_current_config_is_restarted_twice_and_its_spread_is_the_between_restart_noise(
    tmp_path: Path,
) -> None:
    loop = make_loop(tmp_path, measure=ModelMeasure(4, restart_cv=0.05), budget=Budget(max_restarts=9))
    await loop.run()
    search = loop.search
    current = "ddtree-b8-t4-w2048-bs8"
    labels = [r.label for r in search.records.values()]
    assert labels.count(current) == 1 and f"{current}.r2" in labels, labels
    assert [r.label for r in search.reference_records()] == [current, f"{current}.r2"]
    repeat = loop.run_dir.read_result(f"{current}.r2")
    assert repeat is not None and repeat["config"] == search.records[current].cfg.short()
    assert repeat["gates"]["skipped"] and repeat["gates"]["reason"].startswith(f"not gated: restart 2 of {current}")
    between = search.noise.between()
    assert between.measured is not None and between.dof == 1
    # the current config's figure is the mean over its two restarts
    final = search.final_estimate(search.records[current], "single-stream")
    assert final is not None and final.n == 6
    # the repeat never wins on its own and is never the surrogate's second point for its config
    assert all(w.label != f"{current}.r2" for w in verdict.winners(search))


def test_the_current_config_is_measured_to_the_end_even_when_clearly_behind(tmp_path: Path) -> None:
    from repro_py.tune.records import Proposal  # noqa: PLC0415

    search = make_loop(tmp_path).search
    by_label = search.space.by_label()
    search.start(Proposal(by_label["ddtree-b5-t1-w2048-bs8"], "test"))
    search.judge("ddtree-b5-t1-w2048-bs8", 0, [fixed_cell([100.0, 101.0, 99.0])])
    search.start(Proposal(by_label["ddtree-b8-t4-w2048-bs8"], "test"))
    search.judge("ddtree-b8-t4-w2048-bs8", 0, [fixed_cell([70.0, 71.0, 69.0])])
    decision = search.records["ddtree-b8-t4-w2048-bs8"].rungs[0].decisions["single-stream"]
    assert decision["keep"] and "the inventory's current config is measured to the end" in decision["reason"]
    assert "clearly behind ddtree-b5-t1-w2048-bs8" in decision["reason"]


async def test_the_current_config_joins_a_space_that_lacks_it(tmp_path: Path) -> None:
    space = {"configs": [{"algorithm": "none"}], "grid": {"algorithm": ["ddtree"], "budget": [5], "topk": [1]}}
    loop = make_loop(tmp_path, space, budget=Budget(max_restarts=8))
    assert "ddtree-b8-t4-w2048-bs8" in loop.search.space.by_label()
    await loop.run()
    assert [r.label for r in loop.search.records.values()][:2] == ["baseline", "ddtree-b8-t4-w2048-bs8"]


def test_either_is_a_sound_choice_only_when_the_difference_is_shown_to_be_small(tmp_path: Path) -> None:
    from repro_py.tune.noise import NoiseModel  # noqa: PLC0415
    from repro_py.tune.records import Proposal  # noqa: PLC0415

    def winner_note(noise: NoiseModel | None, values: dict[str, list[float]]) -> str:
        search = make_loop(tmp_path, ladder=make_ladder(full_tokens=64, screen_tokens=64)).search
        if noise is not None:
            search.noise = noise
        for label, repeats in values.items():
            search.start(Proposal(search.space.by_label()[label], "test"))
            search.judge(label, 0, [fixed_cell(repeats)])
            search.finish(label, {"status": "ok", "gates": {"passed": True, "coding": {"pass_rate": 1.0}}})
        return verdict.winners(search)[0].note

    # 3% apart with a 10% spread per repeat: the runner-up may well be better; not "either is a sound choice"
    wide = winner_note(None, {"ddtree-b5-t1-w2048-bs8": [110.0, 100.0, 90.0], "ddtree-b6-t2-w2048-bs8": [107, 97, 87]})
    assert "either is a sound choice" not in wide and "not distinguishable from ddtree-b6-t2-w2048-bs8" in wide
    # 0.1% apart, measured tightly: not told apart, but shown to be within 2% of each other
    tight = NoiseModel(prior_cv=0.001, prior_dof=100, floor_cv=0.001)
    close = winner_note(
        tight, {"ddtree-b5-t1-w2048-bs8": [100.2, 100.0, 100.1], "ddtree-b6-t2-w2048-bs8": [100.1, 99.9, 100.0]}
    )
    assert close.startswith("within 2% of ddtree-b6-t2-w2048-bs8") and close.endswith("either is a sound choice")


#: The benchmark's space A (benchmarks/tune_vs_grid.py): small budgets, top-K up to 4, block 8, windows 128/512/none,
#: the DFlash chains; the inventory's current config b8-t4-w2048-bs8 joins it.
SPACE_A: dict[str, Any] = {
    "configs": [{"algorithm": "none"}, {"algorithm": "dflash", "block_size": 8, "window": "none"},
                {"algorithm": "dflash", "block_size": 16, "window": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [3, 4, 5, 6, 8], "topk": [1, 2, 4], "block_size": [8],
             "window": [128, 512, "none"]},
}  # fmt: skip


#: benchmarks/tune_vs_grid.py's space I: budgets 4..10 x top-K 1, 2, 4, 6 x blocks 8 and 16, a full draft cache
SPACE_I: dict[str, Any] = {
    "configs": [{"algorithm": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [4, 5, 6, 7, 8, 10], "topk": [1, 2, 4, 6], "block_size": [8, 16],
             "window": ["none"]},
}  # fmt: skip


def measure_fixed(search: Search, measured: dict[str, float]) -> None:
    """Each config of ``measured`` measured (one rung) at its figure, with a 1% spread, and gated."""
    by_label = search.space.by_label()
    for label, tps in measured.items():
        search.start(Proposal(by_label[label], "test"))
        search.judge(label, 0, [fixed_cell([tps, tps * 1.01, tps * 0.99])])
        search.finish(label, {"status": "ok", "gates": {"passed": True, "coding": {"pass_rate": 1.0}}})


async def test_the_surrogate_tries_new_settings_before_another_top_k_of_measured_ones(tmp_path: Path) -> None:
    # Single-stream over space I, 13 restarts (30% of its distinct configs, as the benchmark gives), 3% between
    # restarts, the model over the generation. The step time does not depend on top-K, yet the previous release's
    # surrogate, least sure of the top-K values it had seen least, spent most of its restarts on top-K variants of
    # budgets it had measured (b10-t1 then b10-t2, b7-t1, b7-t2, b7-t6, b8-t1, b8-t2 at seed 0) and measured a config
    # within 2% of the model's best (budget 5 or 6 at block 16, budget 5 at block 8) in 1 of 10 seeds. New settings
    # at the mean's top-K found one in 10 of 10; at the top-K fewest measured configs have (this release: the replays
    # of M, N and O favoured it, those of the held-out S, T and U did not: docs/tune.md), in 6 of 10 on this model,
    # whose acceptance falls as top-K grows at every budget, so that a spread of top-K values costs it restarts
    found = []
    for seed in range(10):
        measure = ModelMeasure(seed, cv_at_512=0.05, restart_cv=0.03, over_generation=True)
        loop = make_loop(tmp_path, SPACE_I, ("single-stream",), measure=measure, budget=Budget(max_restarts=13),
                         run=f"i-{seed}", lossless_mode="shared")  # fmt: skip
        await loop.run()
        seen: set[tuple[object, ...]] = set()
        for rec in loop.search.records.values():  # in the order they were proposed
            key = proposals.settings_key(loop.search, rec.cfg)
            if rec.proposal.startswith("surrogate"):
                assert key not in seen, (seed, rec.cfg.label, [r.cfg.label for r in loop.search.records.values()])
                assert "a setting apart from top-K that no measured config has" in rec.proposal, rec.proposal
            seen.add(key)
        truth = {c.label: true_tps_over_generation(c, 60, 1, 512) for c in loop.search.space.configs}
        (obj,) = loop.search.settings.objectives
        found.append(any(truth[rec.cfg.label] >= 0.98 * max(truth.values()) for rec, _ in loop.search.ranked(obj)))
    assert sum(found) >= 6, found


def test_a_new_setting_is_proposed_at_the_top_k_the_surrogate_predicts_best(tmp_path: Path) -> None:
    # the bound's widest top-K is the one the surrogate knows least (the far end of the range): on the measured
    # grid of space J that crowned b5-t3, 2.5-3% below b5-t1 and b5-t2, in four of seven misses
    search = make_loop(tmp_path, MEDIUM_SPACE, ladder=make_ladder(full_tokens=64, screen_tokens=64)).search
    search.settings = search.settings.previous_release()  # the top-K the mean puts first (the rule tested here)
    measured = {"ddtree-b8-t1-w2048-bs8": 120.0, "ddtree-b8-t4-w2048-bs8": 100.0, "ddtree-b4-t1-w2048-bs8": 110.0,
                "ddtree-b4-t4-w2048-bs8": 90.0, "ddtree-b16-t2-w2048-bs8": 95.0}  # fmt: skip
    measure_fixed(search, measured)
    (obj,) = search.settings.objectives
    surrogate = proposals.surrogate_for(search, obj).fit(proposals.observations(search, obj))
    speculative = [c for c in proposals.unmeasured(search) if c.spec.algorithm != "none"]
    fresh = proposals.new_settings(search, surrogate, speculative)
    # one config per setting apart from top-K that nothing measured has (a 2048 window covers this run: the full
    # cache's setting), at the top-K the surrogate's mean puts first
    seen = {proposals.settings_key(search, r.cfg) for r in search.records.values()}
    keys = [proposals.settings_key(search, c) for c in fresh]
    assert len(set(keys)) == len(keys) and set(keys) == {
        proposals.settings_key(search, c) for c in speculative
    } - seen
    for cfg in fresh:
        same = [c for c in speculative if proposals.settings_key(search, c) == proposals.settings_key(search, cfg)]
        mu, _ = surrogate.predict([c.spec for c in same])
        assert cfg == same[int(np.argmax(mu))]
    # between measured budgets, where top-K 1 measured best at budgets 4 and 8, not the far end of the range
    between = {c.spec.budget: c.spec.topk for c in fresh if c.spec.budget in (5, 6) and c.spec.block_size == 8}
    assert between == {5: 1, 6: 1}, between


def test_a_new_setting_is_proposed_at_the_top_k_the_fewest_measured_configs_have(tmp_path: Path) -> None:
    # Early in a run the surrogate's mean rests on the few configs measured, the current config (top-K 4) first
    # among them, and put every new setting at that top-K: on the measured grid of space P (top-K 1..4) the search
    # then measured b11-t4, b6-t4, b8-t4, b5-t4 and b11-t4-w160, never top-K 1 or 2 where the optimum is, and
    # crowned a top-K 4 tree 4.7% below it. A new setting now goes to the top-K fewest measured configs have (of
    # those, the one the mean puts first), so the surrogate sees top-K vary as it covers the settings.
    search = make_loop(tmp_path, MEDIUM_SPACE, ladder=make_ladder(full_tokens=64, screen_tokens=64)).search
    measured = {"ddtree-b8-t4-w2048-bs8": 120.0, "ddtree-b4-t4-w2048-bs8": 110.0, "ddtree-b16-t4-w2048-bs8": 100.0,
                "ddtree-b3-t1-wnone-bs16": 80.0}  # fmt: skip
    measure_fixed(search, measured)
    (obj,) = search.settings.objectives
    surrogate = proposals.surrogate_for(search, obj).fit(proposals.observations(search, obj))
    speculative = [c for c in proposals.unmeasured(search) if c.spec.algorithm != "none"]
    counts = {1: 1, 4: 3}  # the measured configs per top-K
    fresh = proposals.new_settings(search, surrogate, speculative)
    assert fresh
    for cfg in fresh:
        same = [c for c in speculative if proposals.settings_key(search, c) == proposals.settings_key(search, cfg)]
        fewest = min(counts.get(c.spec.topk, 0) for c in same)
        least = [c for c in same if counts.get(c.spec.topk, 0) == fewest]
        mu, _ = surrogate.predict([c.spec for c in least])
        assert cfg == least[int(np.argmax(mu))], (cfg.label, [c.label for c in least])
        assert cfg.spec.algorithm != "ddtree" or cfg.spec.topk in (2, 8)  # never measured; top-K 4 and 1 were
    # the mean alone (the previous release's rule) puts the new settings at the measured configs' top-K
    search.settings = search.settings.previous_release()
    by_mean = proposals.new_settings(search, surrogate, speculative)
    deep = [c for c in by_mean if c.spec.algorithm == "ddtree" and c.spec.budget is not None and c.spec.budget >= 4]
    assert deep and sum(c.spec.topk == 4 for c in deep) > len(deep) / 2, [c.label for c in deep]


def test_a_local_check_restarts_the_neighbour_the_surrogate_knows_least(tmp_path: Path) -> None:
    # The local check is there for where the smooth surrogate may be wrong (a sharp optimum it rounds off), so its
    # mean does not choose the neighbour. The previous release's rule, the highest upper bound, spent the check on
    # the neighbour the surrogate already rated: on replays of the measured grid of space O (benchmarks/
    # tune_replay.py) it restarted b8-t2 and b6-t2-w96 around the winner b6-t2, never b5, the optimum a step down
    search = make_loop(tmp_path, MEDIUM_SPACE, ladder=make_ladder(full_tokens=64, screen_tokens=64)).search
    measured = {"ddtree-b8-t1-w2048-bs8": 120.0, "ddtree-b8-t4-w2048-bs8": 100.0, "ddtree-b4-t1-w2048-bs8": 110.0,
                "ddtree-b4-t4-w2048-bs8": 90.0, "ddtree-b16-t2-w2048-bs8": 95.0, "ddtree-b12-t1-w2048-bs8": 112.0,
                "ddtree-b5-t1-w2048-bs8": 118.0, "ddtree-b8-t1-w2048-bs16": 100.0,
                "ddtree-b4-t1-w2048-bs16": 95.0}  # fmt: skip
    measure_fixed(search, measured)
    (obj,) = search.settings.objectives
    surrogate = proposals.surrogate_for(search, obj).fit(proposals.observations(search, obj))
    search.surrogates[obj.key] = surrogate
    pool = proposals.unmeasured(search)
    winner = search.ranked(obj)[0][0].cfg
    assert winner.label == "ddtree-b8-t1-w2048-bs8"
    near = [c for c in search.space.neighbours(winner) if c in pool]
    mu, sd = surrogate.predict([c.spec for c in near])
    least_known = near[int(np.argmax(sd))]
    highest_bound = near[int(np.argmax(mu + search.settings.kappa * sd))]
    assert least_known != highest_bound  # the two rules differ here
    check = proposals.local_check(search, pool)
    assert check is not None and check.cfg == least_known
    assert "a neighbour of the winner ddtree-b8-t1-w2048-bs8 not yet measured, the one the surrogate knows least" in (
        check.reason
    )
    search.settings = search.settings.previous_release()  # the previous release's rule, kept for the benchmarks
    previous = proposals.local_check(search, pool)
    assert previous is not None and previous.cfg == highest_bound
    assert "the one with the highest upper bound" in previous.reason


async def test_the_surrogate_searches_near_the_winner_so_far_and_finds_the_optimum(tmp_path: Path) -> None:
    # Throughput at concurrency 32 over space A, 14 restarts (30% of its distinct configs, as the benchmark
    # gives): bounds taken over the whole space spent the restarts on top-K 4 trees and the far corners and
    # ended 5-6% below the model's optimum in 9 of 10 seeds; searching the winner's neighbourhood finds it (8 of 10
    # with new settings at the mean's top-K, 7 of 10 at the top-K fewest measured configs have: on this model
    # acceptance falls as top-K grows, so a spread of top-K values costs restarts)
    hits, loops = [], []
    for seed in range(10):
        measure = ModelMeasure(seed, cv_at_512=0.05, restart_cv=0.02)
        loop = make_loop(tmp_path, SPACE_A, ("throughput",), measure=measure, budget=Budget(max_restarts=14),
                         run=f"a-{seed}", lossless_mode="shared")  # fmt: skip
        await loop.run()
        truth = {c.label: true_tps(c, 60, 32) for c in loop.search.space.configs}
        (winner,) = verdict.winners(loop.search)
        assert winner.label is not None
        hits.append(truth[winner.label] >= 0.98 * max(truth.values()))
        loops.append(loop)
    assert sum(hits) >= 7, hits
    for loop in loops:
        # after the initial design, each surrogate proposal names the region it was taken from
        reasons = [r.proposal for r in loop.search.records.values() if r.proposal.startswith("surrogate")]
        assert reasons and all("within" in why or "anywhere" in why for why in reasons)
        # the region: every candidate within the radius of the winner so far, widened until one is inside
        obj = loop.search.settings.objectives[0]
        pool = [c for c in proposals.unmeasured(loop.search) if c.spec.algorithm != "none"]
        inside, radius = proposals.trust_region(loop.search, obj, pool)
        assert radius is not None and radius >= loop.search.settings.trust_radius and inside
        best = next(rec for rec, _ in loop.search.ranked(obj) if rec.cfg.spec.algorithm != "none")
        centre = proposals.scaled_features(loop.search, [best.cfg])[0]
        dist = [float(np.sqrt(np.mean((row - centre) ** 2))) for row in proposals.scaled_features(loop.search, pool)]
        assert {c.label for c, d in zip(pool, dist, strict=True) if d <= radius} == {c.label for c in inside}
        assert radius == loop.search.settings.trust_radius or min(dist) > radius / 1.5
