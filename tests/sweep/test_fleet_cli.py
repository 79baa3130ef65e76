"""The fleet's command line before any restart: hosts left out by name, classes, and what is refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from repro_py.endpoint import Endpoint
from repro_py.exitcodes import ExitCode
from repro_py.sweep import fleet, hostclass
from repro_py.sweep.cli import build_parser
from tests.sweep.conftest import BUNDLE, make_target

DEFAULT = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048}
GRID = [{"algorithm": "none"}, DEFAULT]


def _targets(n: int, **differ: Any) -> list[Any]:
    out = []
    for i in range(1, n + 1):
        hostvars: dict[str, Any] = {"sweep_default_config": DEFAULT, "sweep_grid": {"configs": GRID}}
        hostvars.update(differ.get(f"h{i}", {}))
        base = make_target(hostvars=hostvars)
        out.append(dataclasses.replace(base, host=f"h{i}", endpoint=Endpoint(f"http://127.0.0.1:{41000 + i}")))
    return out


def _run(tmp_path: Path, targets: list[Any], *extra: str) -> tuple[int, str]:
    args = build_parser().parse_args(["inventory/test", "--results", str(tmp_path), *extra])
    console = Console(record=True, width=200)
    rc = fleet.run_fleet(args, targets, bundle=BUNDLE, console=console, out=console)
    return rc, console.export_text()


def _class(model: str = "NVIDIA B300", series: str = "ab" * 32) -> hostclass.HostClass:
    return hostclass.HostClass(gpu_model=model, gpu_count=8, driver="580.95.05", toolkit="13.0", sglang="0.5.23",
                               series=series)  # fmt: skip


def test_one_class_of_hosts_that_differ_in_their_grid_is_refused_naming_both(tmp_path: Path) -> None:
    targets = _targets(2, h2={"sweep_grid": {"configs": [{"algorithm": "none"}]}})
    rc, text = _run(tmp_path, targets, "--reconfigurer", "local", "--dry-run")
    assert rc == ExitCode.USAGE
    assert "h1 and h2 are of one class but differ in sweep_grid" in text


def test_a_fleet_without_a_default_config_is_refused(tmp_path: Path) -> None:
    targets = _targets(2, h1={"sweep_default_config": None}, h2={"sweep_default_config": None})
    rc, text = _run(tmp_path, targets, "--reconfigurer", "local", "--dry-run")
    assert rc == ExitCode.USAGE and "needs sweep_default_config" in text


@pytest.mark.parametrize(("flags", "said"), [
    (["--resume"], "--resume over several hosts: pass --run-id"),
    (["--host-offset-limit", "1.5"], "--host-offset-limit 1.5: a fraction in (0, 1) expected"),
])  # fmt: skip
def test_bad_flags_are_refused_before_anything(tmp_path: Path, flags: list[str], said: str) -> None:
    rc, text = _run(tmp_path, _targets(2), "--reconfigurer", "local", *flags)
    assert rc == ExitCode.USAGE and said in text


def test_unusable_hosts_are_left_out_by_name_and_classes_are_planned_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b300, rtx = _class(), _class("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    probes = {
        "h1": hostclass.HostProbe("h1", b300, None),
        "h2": hostclass.HostProbe("h2", rtx, None),
        "h3": hostclass.HostProbe("h3", None, "h3: unreachable (ssh: connect to host 10.0.0.3 port 22: refused)"),
        "h4": hostclass.HostProbe("h4", b300, "h4: patch series not applied (state file ... missing)"),
        "h5": hostclass.HostProbe("h5", b300, None),
    }
    asked: list[list[str]] = []

    def fake_probe(bundle: Path, inventories: Any, hosts: list[str], **kwargs: Any) -> dict[str, Any]:
        asked.append(list(hosts))
        return probes

    monkeypatch.setattr(hostclass, "probe_hosts", fake_probe)
    rc, text = _run(tmp_path, _targets(5), "--dry-run")
    assert rc == ExitCode.OK, text
    assert asked == [["h1", "h2", "h3", "h4", "h5"]]  # one play over every host
    assert "left out: h3: unreachable (ssh: connect to host 10.0.0.3 port 22: refused)" in text
    assert "left out: h4: patch series not applied" in text
    assert f"class {b300.key()}: 2 host(s): h1, h5" in text
    assert f"class {rtx.key()}: 1 host(s): h2" in text


def test_no_usable_host_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probes = {h: hostclass.HostProbe(h, None, f"{h}: unreachable (timeout)") for h in ("h1", "h2")}
    monkeypatch.setattr(hostclass, "probe_hosts", lambda *a, **k: probes)
    rc, text = _run(tmp_path, _targets(2))
    assert rc == ExitCode.USAGE
    assert "no usable host: h1: unreachable (timeout); h2: unreachable (timeout)" in text


def test_a_dry_run_leaves_nothing_and_a_run_never_writes_into_another_runs_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = {h: hostclass.HostProbe(h, _class(), None) for h in ("h1", "h2")}
    monkeypatch.setattr(hostclass, "probe_hosts", lambda *a, **k: probes)
    rc, _ = _run(tmp_path, _targets(2), "--dry-run", "--run-id", "r1")
    assert rc == ExitCode.OK and not (tmp_path / "r1").exists()
    (tmp_path / "one-host-run").mkdir()  # a one-host run's directory: no fleet.json
    rc, text = _run(tmp_path, _targets(2), "--run-id", "one-host-run")
    assert rc == ExitCode.USAGE and "one-host-run exists; pass --resume" in text
    rc, text = _run(tmp_path, _targets(2), "--run-id", "one-host-run", "--resume")
    assert rc == ExitCode.USAGE and "has no fleet.json" in text
