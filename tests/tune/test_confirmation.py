"""Confirmation restarts: leaders the run's confidence does not separate are restarted again at the end of the
budget, and a config's figure is the mean over its restarts (so a winner is not just the luckiest of several
near-equal configs measured once)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from repro_py.sweep.reconfigure import AnsibleReconfigurer
from repro_py.tune import repeats, verdict
from repro_py.tune.ladder import make_ladder
from repro_py.tune.loop import Budget
from repro_py.tune.records import Proposal, RepeatedConfig
from repro_py.tune.search import Search
from tests.sweep.conftest import make_target
from tests.tune.conftest import fixed_cell, make_loop
from tests.tune.fakes import ModelMeasure

LUCKY, STEADY, BEHIND = "ddtree-b5-t1-w2048-bs8", "ddtree-b6-t2-w2048-bs8", "ddtree-b12-t4-w2048-bs8"


def _one_rung_search(tmp_path: Path) -> Search:
    """A search whose ladder is one rung, so one ``judge`` call measures a config to the end."""
    return make_loop(tmp_path, ladder=make_ladder(full_tokens=64, screen_tokens=64), default=None).search


def _measure(search: Search, cfg: Any, values: list[float], *, status: str = "ok") -> None:
    search.start(Proposal(cfg, "test"))
    search.judge(cfg.label, 0, [fixed_cell(values)])
    gates: dict[str, Any] = (
        {"skipped": True, "reason": search.wants_gates(cfg.label)[1]}
        if isinstance(cfg, RepeatedConfig)
        else {"passed": True, "coding": {"pass_rate": 1.0}}
    )
    result: dict[str, Any] = {"status": status, "gates": gates}
    if status != "ok":
        result["failure"] = {"class": "start_failed", "reason": "the engine exited during load"}
    search.finish(cfg.label, result)


def test_a_lucky_leader_is_restarted_again_and_judged_over_its_restarts(tmp_path: Path) -> None:
    search = _one_rung_search(tmp_path)
    by_label = search.space.by_label()
    _measure(search, by_label[LUCKY], [104.0, 104.5, 103.5])
    _measure(search, by_label[STEADY], [102.0, 102.5, 101.5])
    assert verdict.winners(search)[0].label == LUCKY
    # no restart a new candidate could have goes to a confirmation
    assert repeats.confirmation(search, remaining=10) is None
    assert repeats.confirmation(search, remaining=2, per_config=2) is None
    assert repeats.confirmation(search, remaining=None) is None
    # one restart left where a gated candidate takes two
    first = repeats.confirmation(search, remaining=1, per_config=2)
    assert first is not None and first.cfg.label == f"{LUCKY}.r2", first
    assert first.reason.startswith(f"confirmation for single-stream: restart 2 of {LUCKY}")
    assert f"ahead of {STEADY}" in first.reason and "below the 90% asked" in first.reason
    _measure(search, first.cfg, [99.0, 99.5, 98.5])  # its second restart reads low
    lucky = search.final_estimate(search.records[LUCKY], "single-stream")
    assert lucky is not None and lucky.n == 6 and abs(lucky.mean - 101.5) < 1e-9
    assert verdict.winners(search)[0].label == STEADY
    assert search.records[f"{LUCKY}.r2"].gates_reason.startswith(
        f"not gated: restart 2 of {LUCKY}, which was gated in its first restart (this one confirms a leader's figure)"
    )
    # then (the search stopping) the new leader, restarted least
    second = repeats.confirmation(search, remaining=None, stopping=True)
    assert second is not None and second.cfg.label == f"{STEADY}.r2", second
    _measure(search, second.cfg, [101.0, 101.5, 100.5])
    # the run's confirmations are spent (two by default)
    assert repeats.confirmation(search, remaining=None, stopping=True) is None
    assert [r.label for r in search.confirmations()] == [f"{LUCKY}.r2", f"{STEADY}.r2"]


def test_no_confirmation_when_the_winner_is_ahead_at_the_runs_confidence(tmp_path: Path) -> None:
    search = _one_rung_search(tmp_path)
    by_label = search.space.by_label()
    _measure(search, by_label[LUCKY], [130.0, 130.5, 129.5])
    _measure(search, by_label[STEADY], [100.0, 100.5, 99.5])
    assert repeats.confirmation(search, remaining=1) is None
    assert repeats.confirmation(search, remaining=None, stopping=True) is None


def test_a_leader_whose_repeated_restart_failed_cannot_win(tmp_path: Path) -> None:
    search = _one_rung_search(tmp_path)
    by_label = search.space.by_label()
    _measure(search, by_label[LUCKY], [104.0, 104.5, 103.5])
    _measure(search, by_label[STEADY], [102.0, 102.5, 101.5])
    _measure(search, by_label[BEHIND], [60.0, 60.5, 59.5])
    again = repeats.confirmation(search, remaining=0)
    assert again is not None
    _measure(search, again.cfg, [], status="failed")
    assert [w.label for w in verdict.winners(search)] == [STEADY]


async def test_a_restart_no_gated_candidate_fits_in_confirms_a_leader_within_the_budget(tmp_path: Path) -> None:
    # 14 restarts, each gated config taking two (its lossless gate's own restart): one is left over at the end
    loop = make_loop(tmp_path, measure=ModelMeasure(2, restart_cv=0.03), budget=Budget(max_restarts=14))
    outcome = await loop.run()
    search = loop.search
    confirmations = search.confirmations()
    assert len(confirmations) == 1, [r.label for r in search.records.values()]
    assert outcome.restarts == 14 and outcome.stop_reason.startswith("restart budget reached: 13 of 14")
    # they are the run's last restarts, each a leader's own config, never gated, never a winner on its own
    order = [r.label for r in sorted(search.records.values(), key=lambda r: r.order)]
    assert order[-len(confirmations) :] == [r.label for r in confirmations]
    for rec in confirmations:
        first = search.records[rec.base_label]
        result = loop.run_dir.read_result(rec.label)
        assert result is not None and result["config"] == first.cfg.short()
        assert result["gates"]["skipped"] and "confirms a leader's figure" in result["gates"]["reason"]
        assert rec.proposal.startswith("confirmation for single-stream")
        assert all(w.label != rec.label for w in verdict.winners(search))
    (won,) = verdict.winners(search)
    assert won.estimate is not None
    assert won.estimate.n == 3 * len(search.restarts_of(search.records[str(won.label)]))
    # --resume rebuilds the same search from the result files: the confirmation counted, the same winner
    again = make_loop(tmp_path, measure=ModelMeasure(2, restart_cv=0.03), budget=Budget(max_restarts=14))
    await again.run()
    assert [r.label for r in again.search.confirmations()] == [r.label for r in confirmations]
    (won2,) = verdict.winners(again.search)
    assert won2.label == won.label and won2.estimate is not None and won2.estimate.mean == won.estimate.mean


def test_a_repeated_restart_forces_the_service_to_restart_on_a_host_that_still_runs_the_config(tmp_path: Path) -> None:
    # A leader confirmed right after its first restart, on the host that measured it (a fleet of two test hosts):
    # the service role found nothing changed, kept the running process and reported no restart (no time to ready)
    search = _one_rung_search(tmp_path)
    cfg = search.space.by_label()[LUCKY]
    seen: list[dict[str, object]] = []

    class Stop(Exception):
        pass

    def run_play(playbook: Path, private_dir: Path, extravars: dict[str, object], cancel: object = None) -> None:
        seen.append(dict(extravars))
        raise Stop

    reconfigurer = AnsibleReconfigurer(Path(), make_target(), extra_vars={"sglang_service_sim_speed": 20})
    reconfigurer.run_play = run_play  # type: ignore[method-assign]
    for planned in (cfg, RepeatedConfig.of(cfg, 2)):
        with pytest.raises(Stop):
            reconfigurer.reconfigure(planned, tmp_path / planned.label, threading.Event())
    first, again = ({k: v for k, v in e.items() if k != "sglang_service_report_path"} for e in seen)
    assert "sglang_service_force_restart" not in first and first["sglang_service_sim_speed"] == 20
    assert again == {**first, "sglang_service_force_restart": True}
