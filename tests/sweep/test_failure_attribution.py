"""A failed config is described by its own invocation's journal and its own unit."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from repro_py.gates import serverlog
from repro_py.sweep import state
from repro_py.sweep.reconfigure import journal_command, outcome_from_run
from repro_py.sweep.runner import SweepOptions, SweepRunner
from tests.sweep.conftest import BUNDLE, FakeMeasure, FakeReconfigurer, make_plan

CONFIG: dict[str, object] = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048}


class CrashLogReconfigurer(FakeReconfigurer):
    """Ready with invocation ``inv-N``; its journal holds a simulated crash-after fault."""

    def journal(
        self, private_dir: Path, lines: int = 40, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        self.journal_invocations.append(invocation_id)
        return ["host sglang[9]: RuntimeError: SIMULATED fault crash-after:20: the scheduler died"]


async def test_a_crash_during_the_benchmark_reads_the_journal_of_the_invocation_that_served(tmp_path: Path) -> None:
    plan = make_plan([CONFIG], tmp_path=tmp_path, default=None)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    rec = CrashLogReconfigurer()
    measure = FakeMeasure(bench_fail={"ddtree-b8-t4-w2048-bs8"})
    runner = SweepRunner(
        plan, run_dir, rec, measure, bundle=BUNDLE, options=SweepOptions(restore=False), console=Console(quiet=True)
    )
    await runner.run()
    (doc,) = run_dir.results()
    assert doc["failure"]["class"] == "crashed_during_benchmark"
    assert rec.journal_invocations == ["inv-1"]
    reason = doc["failure"]["reason"]
    assert reason.startswith("the simulated engine's injected fault crash-after:20 (RuntimeError: SIMULATED fault")
    assert "; systemd: the engine stopped answering during the benchmark" in reason


def test_the_sweeps_journal_query_selects_one_invocation() -> None:
    cmd = journal_command("sglang.service", 40, "0123abcd")
    assert "_SYSTEMD_INVOCATION_ID=0123abcd + INVOCATION_ID=0123abcd" in cmd and "-u " not in cmd
    assert journal_command("sglang.service", 40, None).endswith("-u sglang.service")
    assert "-u sglang.service" in journal_command("sglang.service", 40, "x; rm -rf /")
    scan = journal_command("sglang.service", 200, "0123abcd", grep=serverlog.PATTERN)
    argv = shlex.split(scan)  # as the command module splits it: the pattern is one argument, unmangled
    assert argv[argv.index("--grep") + 1] == serverlog.PATTERN and "_SYSTEMD_INVOCATION_ID=0123abcd" in argv


def test_a_rolled_back_config_is_fingerprinted_with_the_unit_that_failed() -> None:
    report = {
        "status": "rolled_back",
        "unit_sha256": "r" * 64,  # the last good unit, serving again
        "config_unit_sha256": "f" * 64,  # the unit rendered for this config, which failed
        "failure": {"reason": "not ready", "journal": []},
    }
    out = outcome_from_run(runner_status="failed", rc=2, report=report, events=[], wall_s=1.0, artifacts=None)
    assert out.unit_sha256 == "f" * 64


def test_the_report_records_the_configs_own_unit() -> None:
    text = (BUNDLE / "roles/sglang_service/tasks/report.yml").read_text(encoding="utf-8")
    assert 'config_unit_sha256: "{{ (_sglang_service_fingerprint | default({})).unit_sha256' in text


async def test_the_result_records_a_configs_own_extra_vars(tmp_path: Path) -> None:
    entry = {**CONFIG, "extra_vars": {"sglang_service_ready_timeout": 2400}}
    plan = make_plan([entry], tmp_path=tmp_path, default=None)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    runner = SweepRunner(
        plan,
        run_dir,
        FakeReconfigurer(),
        FakeMeasure(),
        bundle=BUNDLE,
        options=SweepOptions(restore=False),
        console=Console(quiet=True),
    )
    await runner.run()
    (doc,) = run_dir.results()
    assert doc["extra_vars"] == {"sglang_service_ready_timeout": 2400}
    assert "extra_vars" not in doc["config"]
