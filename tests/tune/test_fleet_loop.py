"""The tuner on several hosts of one class, over fakes: the current config on every host first, candidates side by
side (a batch that spreads), budgets over every host, a lost host's config proposed again elsewhere, a flagged
host's measurements out of the search, Ctrl-C with every host restored, resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from repro_py.endpoint import Endpoint
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig
from repro_py.tune import verdict
from repro_py.tune.budget import Budget
from repro_py.tune.fleetbook import EXCLUDED, FLAGGED
from tests.sweep.conftest import SlowReconfigurer
from tests.tune.conftest import make_fleet_loop
from tests.tune.fakes import ModelMeasure

CURRENT = "ddtree-b8-t4-w2048-bs8"


class HostModelMeasure(ModelMeasure):
    """The model's figures, scaled per host (its endpoint's port -> a speed factor), with the benchmarks that run at
    once counted (``peak``)."""

    def __init__(self, seed: int = 0, speed: dict[int, float] | None = None, **kwargs: Any) -> None:
        super().__init__(seed, **kwargs)
        self.speed = dict(speed or {})
        self.running = 0
        self.peak = 0

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(0.01)
            out = await super().bench(endpoint, cfg, bench)
        finally:
            self.running -= 1
        factor = self.speed.get(int(endpoint.base_url.rsplit(":", 1)[1]), 1.0)
        for cell in out["cells"]:
            for rep in cell["repeats"]:
                rep["output_tps"] *= factor
                rep["wall_s"] /= factor
                for key in ("ttft_ms", "itl_chunk_ms", "itl_token_ms"):
                    rep[key] = {q: v / factor for q, v in rep[key].items()}
            cell["median"]["output_tps"] *= factor
        return out


def _results(loop: Any) -> dict[str, dict[str, Any]]:
    return {str(d["label"]): dict(d) for d in loop.run_dir.results()}


def _hosts_of(results: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {label: doc["host"]["name"] for label, doc in results.items()}


async def test_the_current_config_on_every_host_first_then_candidates_side_by_side(tmp_path: Path) -> None:
    recs = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    measure = HostModelMeasure(1)
    loop = make_fleet_loop(tmp_path, recs, measure=measure, budget=Budget(max_restarts=24))
    outcome = await loop.run()

    assert not outcome.interrupted
    # h1 measures the baseline (the lossless reference: its production and its gate's restart), then the current
    # config; the two others start with the current config
    assert recs[0].calls[:3] == ["baseline", "baseline", f"{CURRENT}.r3"], recs[0].calls
    assert recs[1].calls[0] == CURRENT and recs[2].calls[0] == f"{CURRENT}.r2"
    # then every host measures candidates, side by side
    results = _results(loop)
    by_host = _hosts_of(results)
    for host in ("h1", "h2", "h3"):
        candidates = [x for x, h in by_host.items() if h == host and not x.startswith(CURRENT) and x != "baseline"]
        assert candidates, (host, by_host)
    assert measure.peak >= 2
    # the between-restart noise comes from the current config's three restarts, one per host
    between = loop.search.noise.between()
    assert between.measured is not None and between.dof == 2, between
    # every restart counted, on every host, the three restores included, within the budget
    calls = sum(len(r.calls) for r in recs)
    assert outcome.restarts == calls <= 24
    assert all(r.restores[-1] is True and r.calls[-1] == CURRENT for r in recs)  # every host restored
    assert outcome.restore is not None and outcome.restore["status"] == "ok"
    assert set(outcome.restore["hosts"]) == {"h1", "h2", "h3"}
    record = json.loads((loop.run_dir.path / "tune" / "fleet.json").read_text())
    assert {h: v["status"] for h, v in record["hosts"].items()} == {"h1": "active", "h2": "active", "h3": "active"}
    assert all(v["offset"]["flagged"] is False for v in record["hosts"].values())
    assert sum(v["restarts"] for v in record["hosts"].values()) == calls - 3  # the restores come after
    # the results are the sweep's, with the host; no offset applied (the search compares figures as measured)
    assert all(doc["host"]["offset"] is None and doc["host"]["class"] == "classA" for doc in results.values())
    (winner,) = verdict.winners(loop.search)
    assert winner.label is not None and loop.search.records[winner.label].gates == "pass"


async def test_a_config_proposed_while_others_are_in_flight_is_not_one_of_them(tmp_path: Path) -> None:
    """Each host asks when it is free: the configs being measured are neither proposed again nor their equals,
    and the surrogate believes them at its predictions (the batch spreads)."""
    recs = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(2), budget=Budget(max_restarts=30))
    await loop.run()
    from repro_py.tune.proposals import equivalence_key  # noqa: PLC0415

    measured = [r for r in loop.search.records.values() if r.restart == 1]
    keys = [equivalence_key(loop.search, r.cfg) for r in measured]
    assert len(keys) == len(set(keys)), "a config, or one the same for this run, was measured twice"
    productions = [c for r in recs for c, det, restore in zip(r.calls, r.deterministic, r.restores, strict=True)
                   if not det and not restore]  # fmt: skip
    assert len(productions) == len(set(productions)), "a config had two production restarts"
    # the surrogate's proposals were made with configs in flight on the other hosts, believed at its predictions
    believed = [r.proposal for r in loop.search.records.values() if "in flight believed" in r.proposal]
    assert believed, [r.proposal for r in loop.search.records.values()]


async def test_a_host_lost_mid_run_has_its_config_proposed_again_on_another_host(tmp_path: Path) -> None:
    recs = [SlowReconfigurer(delay=0.01), SlowReconfigurer(delay=0.01, lost_after=3), SlowReconfigurer(delay=0.01)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(3), budget=Budget(max_restarts=20))
    outcome = await asyncio.wait_for(loop.run(), timeout=120)

    assert not outcome.interrupted
    h2 = loop.hosts["h2"]
    assert h2.status == EXCLUDED and h2.cause is not None and h2.cause.startswith("unreachable")
    results = _results(loop)
    lost = recs[1].calls[2]  # the config h2 was measuring when it went
    assert lost in results, (lost, sorted(results))
    assert results[lost]["host"]["name"] in {"h1", "h3"}
    (attempt,) = results[lost]["attempts"]
    assert attempt["host"] == "h2" and attempt["cause"].startswith("unreachable")
    assert attempt["failure"]["class"] == "failed_to_start"
    assert not any(doc["host"]["name"] == "h2" and label == lost for label, doc in results.items())
    # the restarts h2 spent count against the budget; h2 is named as not restored
    assert sum(len(r.calls) for r in recs) <= 20
    assert outcome.restore is not None and outcome.restore["status"] == "failed"
    assert outcome.restore["reason"].startswith("h2: ")
    assert outcome.restore["hosts"]["h1"]["status"] == "ok" and outcome.restore["hosts"]["h3"]["status"] == "ok"


async def test_a_host_beyond_the_offset_limit_leaves_the_run_and_the_search(tmp_path: Path) -> None:
    recs = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    measure = HostModelMeasure(4, speed={40003: 0.7})  # h3 runs 30% slower than the others
    loop = make_fleet_loop(tmp_path, recs, measure=measure, budget=Budget(max_restarts=20))
    await loop.run()

    h3 = loop.hosts["h3"]
    assert h3.status == FLAGGED and h3.offset is not None and h3.offset.offset is not None
    assert h3.offset.offset < -0.25 and h3.cause is not None and "beyond the limit of 5%" in h3.cause
    # what h3 measured (its restart of the current config) is kept aside, not in the search or the results
    kept = list((loop.run_dir.path / "flagged" / "h3").glob("*.json"))
    assert [p.stem for p in kept] == [f"{CURRENT}.r2"]
    assert all(doc["host"]["name"] != "h3" for doc in _results(loop).values())
    assert all(r.label != f"{CURRENT}.r2" for r in loop.search.records.values())
    assert len(recs[2].calls) == 2 and recs[2].restores == [False, True]  # its reference, then its restore
    # the noise is the healthy hosts' spread only (a 30% host would dominate it)
    assert loop.search.noise.between().cv < 0.05


async def test_the_budget_counts_every_host_and_a_host_keeps_to_its_own_cap(tmp_path: Path) -> None:
    recs = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(5),
                           budget=Budget(max_restarts=40, max_per_host=6))  # fmt: skip
    outcome = await loop.run()
    assert all(len(r.calls) <= 6 for r in recs), [len(r.calls) for r in recs]
    assert sum(len(r.calls) for r in recs) == outcome.restarts <= 40
    assert all(r.restores[-1] for r in recs)
    assert all(hs.stopped is not None and "--max-restarts-per-host 6" in hs.stopped for hs in loop.hosts.values())


async def test_ctrl_c_stops_every_host_restores_each_and_resume_finishes_without_measuring_twice(
    tmp_path: Path,
) -> None:
    holder: dict[str, Any] = {}

    def interrupt(cfg: PlannedConfig, n: int) -> None:
        if n == 4:  # h1's fourth restart: a candidate, others in flight beside it
            holder["loop"].call_soon_threadsafe(holder["tune"].host_tasks.on_sigint)

    recs = [SlowReconfigurer(delay=0.02, hook=interrupt if i == 0 else None) for i in range(3)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(6), budget=Budget(max_restarts=24))
    holder["tune"], holder["loop"] = loop, asyncio.get_running_loop()
    outcome = await loop.run()
    assert outcome.interrupted
    assert all(r.restores[-1] is True for r in recs)  # every host restored after Ctrl-C
    first = _results(loop)
    assert first and loop.run_dir.read_state()["status"] == "interrupted"

    recs2 = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    again = make_fleet_loop(tmp_path, recs2, measure=HostModelMeasure(6), budget=Budget(max_restarts=24))
    outcome2 = await again.run()
    assert not outcome2.interrupted
    assert set(outcome2.reused) == set(first)  # replayed, not measured again
    assert not set(outcome2.measured_this_session) & set(first)
    assert not any(label in first for r in recs2 for label in r.calls if label != CURRENT)
    assert outcome2.restarts <= 24


async def test_the_baseline_host_lost_gives_the_baseline_to_a_host_that_waits_for_it(tmp_path: Path) -> None:
    # h1 takes the baseline and is gone at once; h2 and h3 measure the current config and wait at its gates
    recs = [SlowReconfigurer(delay=0.05, lost_after=1), SlowReconfigurer(delay=0.01), SlowReconfigurer(delay=0.01)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(7), budget=Budget(max_restarts=20))
    outcome = await asyncio.wait_for(loop.run(), timeout=120)
    assert not outcome.interrupted
    results = _results(loop)
    assert results["baseline"]["host"]["name"] in {"h2", "h3"}
    assert results["baseline"]["attempts"][0]["host"] == "h1"
    assert loop.hosts["h1"].status == EXCLUDED
    assert results[CURRENT]["gates"]["passed"] is True  # judged against the baseline measured elsewhere


async def test_a_host_whose_restart_raises_is_taken_out_and_the_run_goes_on(tmp_path: Path) -> None:
    def boom(cfg: PlannedConfig, n: int) -> None:
        if n == 2:
            raise RuntimeError("ansible-runner: the event stream broke")

    recs = [SlowReconfigurer(delay=0.01), SlowReconfigurer(delay=0.01, hook=boom), SlowReconfigurer(delay=0.01)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(8), budget=Budget(max_restarts=20))
    outcome = await asyncio.wait_for(loop.run(), timeout=120)
    assert not outcome.interrupted
    assert loop.hosts["h2"].status == EXCLUDED
    assert loop.hosts["h2"].cause == "its worker raised RuntimeError: ansible-runner: the event stream broke"
    assert (winner := verdict.winners(loop.search)[0]).label is not None, winner.note


async def test_a_lost_hosts_restore_is_still_set_aside_so_the_run_keeps_to_its_budget(tmp_path: Path) -> None:
    """An unreachable host is still tried at the end (its own failure said), so its restore stays set aside after it
    is taken out: with a budget that binds, every call on every host, the three restores included, keeps to it
    (several budgets, as where the run's last config lands depends on which host asks first)."""
    for budget in (15, 16, 17, 18):
        recs = [SlowReconfigurer(delay=0.01), SlowReconfigurer(delay=0.01, lost_after=3), SlowReconfigurer(delay=0.01)]
        loop = make_fleet_loop(tmp_path / str(budget), recs, measure=HostModelMeasure(3),
                               budget=Budget(max_restarts=budget))  # fmt: skip
        outcome = await asyncio.wait_for(loop.run(), timeout=120)

        assert loop.hosts["h2"].status == EXCLUDED
        assert recs[1].calls[-1] == CURRENT and recs[1].restores[-1] is True  # the lost host's restore was tried
        assert outcome.stop_reason.startswith("restart budget reached"), outcome.stop_reason
        assert outcome.restarts == sum(len(r.calls) for r in recs) <= budget, (budget, [r.calls for r in recs])
        assert loop.reserve() == 3


async def test_a_host_whose_lease_was_lost_is_not_touched_at_the_end_and_has_no_restore_set_aside(
    tmp_path: Path,
) -> None:
    recs = [SlowReconfigurer(delay=0.01) for _ in range(3)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(3), budget=Budget(max_restarts=12))
    h2 = loop.hosts["h2"]
    assert loop.reserve() == 3
    h2.status, h2.cause = EXCLUDED, "unreachable: ssh: Connection refused"
    assert loop.reserve() == 3
    h2.cause = "host lease lost: another run holds it"
    assert loop.reserve() == 2


class LeaseLostReconfigurer(SlowReconfigurer):
    """From ``lost_after`` on, another run holds this host's lease: its restarts fail and :meth:`check` says so."""

    def check(self) -> str | None:
        return "host lease lost: another run holds it" if self.lost else None


async def test_a_host_whose_lease_was_lost_counts_no_restore_it_did_not_make(tmp_path: Path) -> None:
    recs = [SlowReconfigurer(delay=0.01), LeaseLostReconfigurer(delay=0.01, lost_after=3), SlowReconfigurer(delay=0.01)]
    loop = make_fleet_loop(tmp_path, recs, measure=HostModelMeasure(3), budget=Budget(max_restarts=16))
    outcome = await asyncio.wait_for(loop.run(), timeout=120)

    h2 = loop.hosts["h2"]
    assert h2.status == EXCLUDED and h2.cause is not None and h2.cause.startswith("host lease lost")
    assert recs[1].restores[-1] is False  # the end did not touch it
    assert outcome.restore is not None and outcome.restore["hosts"]["h2"]["status"] == "failed"
    assert "another run's now" in outcome.restore["hosts"]["h2"]["reason"]
    assert outcome.restarts == sum(len(r.calls) for r in recs) <= 16, (outcome.restarts, [r.calls for r in recs])
