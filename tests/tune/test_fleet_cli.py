"""``python -m repro_py.tune`` over several hosts: what is refused before any restart (two classes, a budget too
small for every host's restarts), hosts left out by name, and a run on three local simulated engines that tunes,
reports and writes the winner back for every host of the class."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from repro_py.exitcodes import ExitCode
from repro_py.sweep import hostclass, restarter
from repro_py.tune.cli import main

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("sglang-fleet-1", "sglang-fleet-2", "sglang-fleet-3")
SPACE = {
    "configs": [{"algorithm": "none"}],
    "grid": {"algorithm": ["ddtree"], "budget": [4, 5, 8, 12], "topk": [1, 4], "window": [2048], "block_size": [8]},
}


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """tests/fleet/inventory with a third host (as its second, on ports of its own) and inventory/local's values
    copied in, the engine sped up: a write-back lands in the copy."""
    inv = tmp_path / "inv"
    inv.mkdir()
    hosts = yaml.safe_load((ROOT / "tests" / "fleet" / "inventory" / "hosts.yml").read_text())
    members = hosts["all"]["children"]["sglang_servers"]["hosts"]
    members[HOSTS[2]] = {**members[HOSTS[1]], "ansible_port": 31033, "sglang_service_port": 31043}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    shutil.copytree(ROOT / "inventory" / "local" / "group_vars", inv / "group_vars")
    service = inv / "group_vars" / "all" / "service.yml"
    doc = yaml.safe_load(service.read_text())
    doc.update(sglang_service_sim_speed=20.0, sglang_service_sim_load_seconds=0.3,
               sglang_service_sim_warmup_seconds=0.1)  # fmt: skip
    service.write_text("---\n" + yaml.safe_dump(doc))
    (tmp_path / "space.yml").write_text(yaml.safe_dump(SPACE))
    return inv


def _class(model: str) -> hostclass.HostClass:
    return hostclass.HostClass(gpu_model=model, gpu_count=8, driver="580.95.05", toolkit="13.0", sglang="0.5.23",
                               series="ab" * 32)  # fmt: skip


def _text(capsys: pytest.CaptureFixture[str]) -> str:
    got = capsys.readouterr()
    return " ".join((got.out + got.err).split())


def test_hosts_of_two_classes_are_refused_each_class_named_before_any_restart(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    b300, rtx = _class("NVIDIA B300"), _class("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    probes = {HOSTS[0]: hostclass.HostProbe(HOSTS[0], b300, None), HOSTS[1]: hostclass.HostProbe(HOSTS[1], rtx, None),
              HOSTS[2]: hostclass.HostProbe(HOSTS[2], b300, None)}  # fmt: skip
    monkeypatch.setattr(hostclass, "probe_hosts", lambda *a, **k: probes)
    code = main([str(inventory), "--objective", "single-stream", "--results", str(tmp_path / "r")])
    text = _text(capsys)
    assert code == ExitCode.USAGE and "nothing was restarted" in text
    assert (f"the hosts are of 2 hardware classes (class {b300.key()}: {HOSTS[0]}, {HOSTS[2]}; class {rtx.key()}: "
            f"{HOSTS[1]}); a tuning run ranks configs within one class") in text  # fmt: skip
    assert not (tmp_path / "r").exists()


def test_an_unusable_host_is_left_out_by_name_and_the_class_planned_on_the_others(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    b300 = _class("NVIDIA B300")
    down = f"{HOSTS[2]}: unreachable (ssh: connect to host 127.0.0.1 port 31033: Connection refused)"
    probes = {HOSTS[0]: hostclass.HostProbe(HOSTS[0], b300, None), HOSTS[1]: hostclass.HostProbe(HOSTS[1], b300, None),
              HOSTS[2]: hostclass.HostProbe(HOSTS[2], None, down)}  # fmt: skip
    monkeypatch.setattr(hostclass, "probe_hosts", lambda *a, **k: probes)
    code = main([str(inventory), "--objective", "single-stream", "--dry-run", "--results", str(tmp_path / "r")])
    text = _text(capsys)
    assert code == ExitCode.OK, text
    assert f"left out: {down}" in text
    assert f"class {b300.key()}: 2 host(s): {HOSTS[0]}, {HOSTS[1]}" in text
    assert "ddtree-b8-t4-w2048-bs8 on each of the 2 hosts" in text


def test_a_budget_too_small_for_every_hosts_restarts_is_refused_naming_them(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([str(inventory), "--objective", "single-stream", "--reconfigurer", "local", "--max-restarts", "10",
                 "--space", str(tmp_path / "space.yml"), "--dry-run"])  # fmt: skip
    text = _text(capsys)
    assert code == ExitCode.USAGE
    assert ("--max-restarts 10 is too small for this run: it needs 2 for the baseline (the lossless reference, its "
            "lossless gate's own restart included), 4 for the inventory's current config ddtree-b8-t4-w2048-bs8 (the "
            "one to beat, its lossless gate's own restart included; restarted 3 times to measure the "
            "between-restart noise), 3 for the final restores (one per host), and 2 for at least one candidate; "
            "allowed: 11 or more") in text  # fmt: skip
    for flags, said in ((["--max-restarts-per-host", "1"], "--max-restarts-per-host 1: at least 2"),
                        (["--host-offset-limit", "2"], "--host-offset-limit 2.0: a fraction in (0, 1) expected")):
        code = main([str(inventory), "--objective", "single-stream", "--reconfigurer", "local", "--dry-run", *flags])
        assert code == ExitCode.USAGE and said in _text(capsys)


class _NoAnsible:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the Ansible reconfigurer was used for a run made with --reconfigurer local")


def test_three_local_hosts_tune_side_by_side_report_and_write_the_winner_back_for_each(
    inventory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the hosts run the autoregressive baseline: the winner beats it beyond doubt, so the write-back is proposed
    for name, values in (("sweep.yml", {"sweep_default_config": {"algorithm": "none"}}),
                         ("service.yml", {"sglang_service_spec_algorithm": "none"})):  # fmt: skip
        path = inventory / "group_vars" / "all" / name
        doc = yaml.safe_load(path.read_text())
        doc.update(values)
        path.write_text("---\n" + yaml.safe_dump(doc))
    monkeypatch.setattr(restarter, "AnsibleReconfigurer", _NoAnsible)
    results = tmp_path / "results"
    code = main([str(inventory), "--objective", "single-stream", "--space", str(tmp_path / "space.yml"),
                 "--reconfigurer", "local", "--results", str(results), "--run-id", "f", "--max-tokens", "48",
                 "--screen-tokens", "16", "--repeats", "2", "--max-restarts", "16", "--write",
                 # three local engines share this machine's two cores with the controller: their offsets are load,
                 # not hardware (flagging is tests/tune/test_fleet_loop.py's to prove)
                 "--host-offset-limit", "0.5"])  # fmt: skip
    text = _text(capsys)
    assert code == ExitCode.OK, text[-3000:]
    run = results / "f"
    settings = json.loads((run / "tune" / "settings.json").read_text())
    assert settings["hosts"] == list(HOSTS) and settings["host_class"] == "local-simulated"
    fleet = json.loads((run / "tune" / "fleet.json").read_text())
    assert {h: v["status"] for h, v in fleet["hosts"].items()} == dict.fromkeys(HOSTS, "active")
    assert all(v["restore"]["status"] == "ok" for v in fleet["hosts"].values())
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    assert {d["host"]["name"] for d in docs} == set(HOSTS)  # each host measured
    search = json.loads((run / "tune" / "search.json").read_text())
    assert (run / "tune" / "report.md").is_file() and (run / "MANIFEST.sha256").is_file()
    assert search["restarts"] == sum(v["restarts"] for v in fleet["hosts"].values()) + 3 <= 16  # + the restores
    # the winner written back for every host of the class, each file in effect
    for host in HOSTS:
        written = inventory / "host_vars" / host / "tune.yml"
        assert written.is_file(), text[-2000:]
        assert "measured on: sglang-fleet-1, sglang-fleet-2, sglang-fleet-3" in written.read_text()
    assert text.count("ansible-inventory now resolves") == 3
