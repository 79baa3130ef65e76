"""A sweep holds one host lease for the whole run: taken before the first reconfigure, carried by every play,
given back at the end, on Ctrl-C too; a refusal stops the sweep before anything is restarted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from repro_py.exitcodes import ExitCode
from repro_py.sweep import cli
from repro_py.sweep.extravars import DETERMINISTIC_VAR
from tests.sweep.conftest import FakeMeasure
from tests.sweep.test_cli import write_inventory

GRID = [{"algorithm": "none"}, {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}]


class FakeRunner:
    """Stands in for ansible_runner.run: records each play and its extra vars; every play succeeds,
    unless ``refuse`` (then the lease play fails the way tasks/lease.yml does)."""

    def __init__(self, refuse: str | None = None) -> None:
        self.plays: list[tuple[str, dict[str, Any]]] = []
        self.refuse = refuse

    def __call__(self, **kwargs: Any) -> Any:
        name = Path(str(kwargs["playbook"])).name
        extravars = dict(kwargs["extravars"])
        self.plays.append((name, extravars))
        artifact = Path(str(kwargs["private_data_dir"])) / "artifacts" / "x"
        (artifact / "job_events").mkdir(parents=True, exist_ok=True)
        rc = 0
        if name == "reconfigure.yml":
            Path(str(extravars["sglang_service_report_path"])).write_text(json.dumps({"status": "ready"}))
        elif self.refuse and extravars["sglang_service_lease_state"] == "acquired":
            rc = 2
            event = {"event": "runner_on_failed", "counter": 1,
                     "event_data": {"task": "Refuse, the host is leased to another run", "host": "simhost",
                                    "res": {"msg": self.refuse}}}  # fmt: skip
            (artifact / "job_events" / "1.json").write_text(json.dumps(event))
        status = "successful" if rc == 0 else "failed"
        return type("R", (), {"status": status, "rc": rc, "config": type("C", (), {"artifact_dir": str(artifact)})})()


class InterruptingMeasure(FakeMeasure):
    async def bench(self, endpoint: Any, cfg: Any, bench: Any) -> dict[str, Any]:
        if cfg.spec.algorithm != "none":
            raise KeyboardInterrupt
        return await super().bench(endpoint, cfg, bench)


def _sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: FakeRunner, measure: FakeMeasure, *extra: str
) -> int:
    monkeypatch.setattr(ansible_runner, "run", runner)
    monkeypatch.setattr(cli, "BundleMeasure", lambda **kw: measure)
    # the host_class.yml play (tests/sweep/test_hostclass*.py): here only the lease and reconfigure plays are counted
    monkeypatch.setattr(cli, "class_of", lambda *a, **k: {"key": "test-class"})
    inv = write_inventory(tmp_path / "inv.yml", grid=GRID)
    return cli.main([str(inv), "--results", str(tmp_path / "results"), "--run-id", "r1", "--no-report", *extra])


def _check_one_lease_around_every_play(plays: list[tuple[str, dict[str, Any]]], reconfigures: int) -> None:
    names = [name for name, _ in plays]
    assert names == ["lease.yml", *["reconfigure.yml"] * reconfigures, "lease.yml"]
    first, last = plays[0][1], plays[-1][1]
    assert first["sglang_service_lease_state"] == "acquired" and last["sglang_service_lease_state"] == "released"
    lease_id = first["sglang_service_lease_id"]
    assert lease_id.startswith("sweep-r1-") and last["sglang_service_lease_id"] == lease_id
    holder = first["sglang_service_lease_holder"]
    assert holder["kind"] == "sweep r1" and holder["pid"] > 1 and isinstance(holder["pid_start_time"], int)
    for _, extravars in plays[1:-1]:  # the restore play too
        assert extravars["sglang_service_lease_id"] == lease_id
        assert extravars["sglang_service_lease_holder"] == holder


def test_one_lease_for_the_whole_sweep_given_back_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner()
    assert _sweep(tmp_path, monkeypatch, runner, FakeMeasure()) == ExitCode.OK
    # two configs, each restarted twice (production, then its lossless gate's own), and the restore
    _check_one_lease_around_every_play(runner.plays, reconfigures=5)
    # only the lossless gate's plays carry deterministic inference; production and the restore leave the inventory's
    carried = [extravars.get(DETERMINISTIC_VAR) for name, extravars in runner.plays if name == "reconfigure.yml"]
    assert carried == [None, True, None, True, None]


def test_the_lease_is_given_back_on_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner()
    assert _sweep(tmp_path, monkeypatch, runner, InterruptingMeasure()) == ExitCode.INTERRUPTED
    _check_one_lease_around_every_play(runner.plays, reconfigures=3)  # the baseline's two, the config's production


def test_a_leased_host_is_refused_before_any_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    held = "the host is leased to deploy (lease deploy-1) of bob@ctl2, PID 77, since 2025-01-01T00:00:00+00:00"
    runner = FakeRunner(refuse=held)
    assert _sweep(tmp_path, monkeypatch, runner, FakeMeasure()) == ExitCode.LEASED
    assert [name for name, _ in runner.plays] == ["lease.yml"]  # nothing restarted, nothing given back
    err = " ".join(capsys.readouterr().err.split())
    assert held in err and "--run-id r1 --no-report --take-over-lease" in err
    assert not (tmp_path / "results" / "r1").exists()  # the same command can be run again as is
    runner = FakeRunner()
    assert _sweep(tmp_path, monkeypatch, runner, FakeMeasure(), "--take-over-lease") == ExitCode.OK
    assert runner.plays[0][1]["sglang_service_lease_takeover"] is True


def test_sudo_that_wants_a_password_is_named_with_the_way_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host whose sudo asks for a password stops the sweep before any restart, saying so (not as a lease)."""
    runner = FakeRunner(refuse="Task failed: Premature end of stream waiting for become.\nMissing sudo password")
    assert _sweep(tmp_path, monkeypatch, runner, FakeMeasure()) == ExitCode.LEASED
    assert [name for name, _ in runner.plays] == ["lease.yml"]
    err = " ".join(capsys.readouterr().err.split())
    assert "sudo wants a password; nothing was restarted" in err
    assert "password-less sudo" in err and "--ask-become-pass" in err and "--take-over-lease" not in err
