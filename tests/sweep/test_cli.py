"""The command line: refused plans, dry runs, and a real sweep (simulated engine as local processes)
interrupted with SIGINT and resumed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from repro_py.exitcodes import ExitCode
from repro_py.sweep import cli, cmdline, hostclass, messages
from repro_py.sweep.errors import PlanError
from repro_py.sweep.reconfigure import AnsibleReconfigurer
from tests.sweep.conftest import BUNDLE

GRID = [
    {"algorithm": "none"},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8, "sim_fault": "crash-on-load"},
    {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048, "block_size": 8, "sim_fault": "mask-offset"},
    {"algorithm": "ddtree", "budget": 4, "topk": 4, "window": 2048, "block_size": 8, "sim_fault": "crash-after:3"},
]


def write_inventory(path: Path, *, grid: list[dict[str, object]] | None = None, simulated: bool = True) -> Path:
    doc = {
        "all": {
            "hosts": {"simhost": {"ansible_connection": "local"}},
            "vars": {
                "sglang_service_engine": "simulated" if simulated else "sglang",
                "sglang_service_port": 39999,
                "sglang_service_sim_load_seconds": 0.3,
                "sglang_service_sim_warmup_seconds": 0.1,
                "sglang_service_sim_speed": 50,
                "sweep_default_config": {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048},
                "sweep_grid": grid if grid is not None else GRID,
            },
        }
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_invalid_configs_are_refused_before_any_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("reconfigure must not run for a refused plan")

    monkeypatch.setattr(AnsibleReconfigurer, "reconfigure", never)
    inv = write_inventory(tmp_path / "inv.yml", simulated=False)
    grid = tmp_path / "grid.yml"
    grid.write_text(
        yaml.safe_dump(
            {
                "configs": [
                    {"algorithm": "ddtree", "budget": 8, "topk": 4},
                    {"algorithm": "ddtree", "budget": 4, "topk": 8},
                    {"algorithm": "ddtree", "budget": 8, "topk": 4, "sim_fault": "crash-on-load"},
                ]
            }
        ),
        encoding="utf-8",
    )
    rc = cli.main([str(inv), "--grid", str(grid), "--results", str(tmp_path / "results")])
    assert rc == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "nothing was restarted" in err
    assert "config #2" in err and "topk=8 is out of range" in err
    assert "config #3" in err and "only allowed for a simulated-engine inventory" in err
    assert not (tmp_path / "results").exists()


def test_dry_run_prints_the_plan_and_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path / "inv.yml")
    rc = cli.main([str(inv), "--dry-run", "--results", str(tmp_path / "results"), "--bench-contexts", "60,1024"])
    assert rc == ExitCode.OK
    out = capsys.readouterr().out
    assert "SIMULATED sweep plan" in out
    assert "baseline" in out and "crash-on-load" in out
    assert "estimated duration:" in out
    assert "no measured history: estimate from defaults" in out  # a fresh results directory
    assert "contexts [60, 1024]" in out
    assert not (tmp_path / "results").exists()


def test_a_host_whose_class_cannot_be_read_is_refused_and_a_dry_run_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-host sweep reads the host's hardware class before any restart (recorded in the plan and every
    result): a host without this bundle's patch series is refused there, naming it; --dry-run says a run would be."""
    missing = "simhost: patch series not applied (state file /var/lib/sglang-deploy/sglang-patches.state.json missing)"
    monkeypatch.setattr(hostclass, "probe_hosts",
                        lambda *a, **k: {"simhost": hostclass.HostProbe("simhost", None, missing)})  # fmt: skip
    inv = write_inventory(tmp_path / "inv.yml")
    assert cli.main([str(inv), "--results", str(tmp_path / "results")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "the plan was refused; nothing was restarted" in err and missing in " ".join(err.split())
    assert not (tmp_path / "results").exists()
    assert cli.main([str(inv), "--dry-run", "--results", str(tmp_path / "results")]) == ExitCode.OK
    said = " ".join(capsys.readouterr().err.split())
    assert f"hardware class not read ({missing}): a run would be refused" in said


def _sweep(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(BUNDLE) + os.pathsep + env.get("PYTHONPATH", "")
    proc: subprocess.Popen[str] = subprocess.Popen(
        [sys.executable, "-m", "repro_py.sweep", *args],
        cwd=BUNDLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )
    return proc


def test_sigint_mid_sweep_then_resume_end_to_end(tmp_path: Path) -> None:
    """Real engines (local processes), real bench and gates; Ctrl-C after the first result; --resume."""
    inv = write_inventory(tmp_path / "inv.yml")
    results = tmp_path / "results"
    bench = ["--bench-contexts", "60", "--bench-concurrency", "1", "2", "--repeats", "1", "--max-tokens", "24"]
    common = [str(inv), "--reconfigurer", "local", "--results", str(results), "--run-id", "r1", *bench]
    run_dir = results / "r1"
    proc = _sweep(common)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((run_dir / "configs").glob("*.json")):
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.INTERRUPTED, out
    # the resume command stands on a line of its own, unwrapped however long the paths are (copy-paste), and
    # names the results root the run lives under (without it, --resume would look under results/ and not find it)
    assert f"python -m repro_py.sweep {inv} --resume --run-id r1 --results {results}" in out.splitlines(), out
    state = json.loads((run_dir / "state.json").read_text())
    assert state["status"] == "interrupted"
    first = {p.name: p.read_bytes() for p in (run_dir / "configs").glob("*.json")}
    assert 1 <= len(first) < len(GRID)
    assert not list(run_dir.rglob("*.tmp"))

    proc = _sweep([str(inv), "--reconfigurer", "local", "--results", str(results), "--resume", "--run-id", "r1"])
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.OK, out
    for name, data in first.items():
        assert (run_dir / "configs" / name).read_bytes() == data, f"{name} was rerun"
        assert f"{name[:-5]}: done" in out
    docs = {p.stem: json.loads(p.read_text()) for p in (run_dir / "configs").glob("*.json")}
    assert len(docs) == len(GRID)
    crash = docs["ddtree-b8-t4-w2048-bs8-fault-crash-on-load"]
    assert crash["failure"]["class"] == "failed_to_start"
    assert "exited during startup" in crash["failure"]["reason"]
    assert any("crash-on-load" in line for line in crash["failure"]["journal"])
    garbled = docs["ddtree-b16-t4-w2048-bs8-fault-mask-offset"]
    assert garbled["failure"]["class"] == "gate_failed"
    assert "lossless" in garbled["failure"]["reason"]
    crashed = docs["ddtree-b4-t4-w2048-bs8-fault-crash-after-3"]
    assert crashed["failure"]["class"] == "crashed_during_benchmark", crashed["failure"]
    assert crashed["failure"]["journal"]
    assert docs["baseline"]["status"] == "ok" and docs["ddtree-b8-t4-w2048-bs8"]["status"] == "ok"
    # the oracle: the baseline's outputs, deterministic inference on both sides, the engine's log scanned
    lossless = docs["ddtree-b8-t4-w2048-bs8"]["gates"]["lossless"]
    assert lossless["verdict"] == "lossless" and lossless["deterministic"] == {"server": True, "reference": True}
    assert lossless["server_log"]["scanned"] is True and lossless["server_log"]["passed"] is True
    assert docs["baseline"]["gates"]["lossless"]["verdict"] == "reference"
    assert "deterministic inference" in garbled["failure"]["reason"] or "diverge" in garbled["failure"]["reason"]
    sandbox = json.loads((run_dir / "plan.json").read_text())["sandbox"]
    assert sandbox["mode"] in ("bwrap", "namespaces") and sandbox["unisolated_allowed"] is False
    modes = {d["gates"]["coding"]["isolation_mode"] for d in docs.values() if "coding" in (d.get("gates") or {})}
    assert modes == {sandbox["mode"]}
    assert all(d["engine"]["kind"] == "simulated" for d in docs.values() if d["status"] == "ok")
    # the inventory's sglang_service_sim_speed reached the engines and every figure carries it
    assert {d["engine"]["sim_speed"] for d in docs.values() if d["status"] == "ok"} == {50.0}
    # the host's hardware class, in the plan and every result (a local simulated engine's own)
    assert json.loads((run_dir / "plan.json").read_text())["host_class"]["key"] == "local-simulated"
    assert {d["host_class"]["key"] for d in docs.values()} == {"local-simulated"}

    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("# SIMULATED")
    assert "**SIMULATED, sim-speed x50: figures are model outputs x50.**" in summary
    assert "| baseline (SIMULATED x50) | T=0 (greedy), top_p=1 | ok | pass |" in summary
    assert "ddtree-b16-t4-w2048-bs8-fault-mask-offset | T=0 (greedy), top_p=1 | gate_failed |" in summary
    assert f"| coding sandbox | {sandbox['mode']}; modes in the results: {sandbox['mode']} |" in summary
    gates_row = (r"\| ddtree-b8-t4-w2048-bs8 \| T=0 \(greedy\), top_p=1 \| pass \| lossless \| "
                 r"same_distribution \(p=[0-9.]+\)")
    # the lossless gate: in its own restart
    assert re.search(gates_row + rf" \| clean \| 14/14 \| {sandbox['mode']} \| own \|", summary), summary
    for png in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert (run_dir / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    check = subprocess.run(
        ["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], check=False, cwd=run_dir, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads((run_dir / "state.json").read_text())["status"] == "complete"


def test_the_printed_resume_command_finds_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(stderr=True, width=40)
    messages.print_resume(console, "interrupted", "inventory/local", "r1", results=Path("/tmp/elsewhere"))
    messages.print_resume(console, "interrupted", "inventory/local", "r2", results=Path("results"))
    lines = capsys.readouterr().err.splitlines()
    assert "python -m repro_py.sweep inventory/local --resume --run-id r1 --results /tmp/elsewhere" in lines
    assert "python -m repro_py.sweep inventory/local --resume --run-id r2" in lines


def test_extra_vars_are_typed_and_cannot_set_config_keys() -> None:
    assert cmdline.parse_extra_vars(["sglang_service_sim_speed=10", "flag=true", "name=x"]) == {
        "sglang_service_sim_speed": 10,
        "flag": True,
        "name": "x",
    }
    for bad in ("budget=8", "sim_fault=crash-on-load", "sglang_service_report_path=/x", "novalue", "a b=1"):
        with pytest.raises(PlanError):
            cmdline.parse_extra_vars([bad])


def test_a_controller_without_isolation_is_refused_unless_allowed(tmp_path: Path) -> None:
    """bwrap and unshare really absent from PATH: refused before any restart (exit 4), naming what to install;
    with --allow-unisolated the sweep runs, judges in mode none and says so in every result and the report."""
    inv = write_inventory(tmp_path / "inv.yml", grid=GRID[:2])
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": str(BUNDLE)}
    results = tmp_path / "results"
    args = [sys.executable, "-m", "repro_py.sweep", str(inv), "--reconfigurer", "local", "--results", str(results),
            "--run-id", "u", "--bench-contexts", "60", "--bench-concurrency", "1", "--repeats", "1", "--max-tokens",
            "16", "--no-restore"]
    refused = subprocess.run(args, cwd=BUNDLE, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert refused.returncode == ExitCode.NO_SANDBOX, refused.stdout + refused.stderr
    assert "the run was refused; nothing was restarted" in refused.stderr
    assert "bubblewrap is not installed" in refused.stderr and "--allow-unisolated" in refused.stderr
    assert not results.exists()
    allowed = subprocess.run([*args, "--allow-unisolated"], cwd=BUNDLE, env=env, capture_output=True, text=True,
                             timeout=600, check=False)
    assert allowed.returncode == ExitCode.OK, allowed.stdout + allowed.stderr
    assert "coding sandbox: none (UNISOLATED, allowed by --allow-unisolated)" in allowed.stdout
    run_dir = results / "u"
    docs = [json.loads(p.read_text()) for p in (run_dir / "configs").glob("*.json")]
    assert len(docs) == 2 and all(d["gates"]["coding"]["isolation_mode"] == "none" for d in docs)
    assert all(d["gates"]["coding"]["unisolated_allowed"] is True for d in docs)
    summary = (run_dir / "summary.md").read_text()
    assert "| coding sandbox | none (**UNISOLATED**, allowed by `--allow-unisolated`" in summary
    gates_row = (r"\| ddtree-b8-t4-w2048-bs8 \| T=0 \(greedy\), top_p=1 \| pass \| lossless \| "
                 r"same_distribution \(p=[0-9.]+\)")
    assert re.search(gates_row + r" \| clean \| 14/14 \| none \(UNISOLATED\) \|", summary), summary
