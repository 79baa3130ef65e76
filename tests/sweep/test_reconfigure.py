"""Reading a reconfigure play's outcome: report JSON + runner events; a real ansible-runner run."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import ansible_runner
import pytest

from repro_py.endpoint import Endpoint
from repro_py.sweep.grid import validate_config
from repro_py.sweep.inventory import Target
from repro_py.sweep.reconfigure import AnsibleReconfigurer, failed_task_messages, outcome_from_run


def _event(kind: str, task: str, msg: str, action: str = "ansible.builtin.fail", **extra: object) -> dict[str, object]:
    return {
        "event": kind,
        "counter": 1,
        "event_data": {"task": task, "host": "h1", "resolved_action": action, "res": {"msg": msg}, **extra},
    }


def test_ready_report_is_ok() -> None:
    report = {"status": "ready", "changed": True, "time_to_ready_s": 3.2, "invocation_id": "i1", "main_pid": 7,
              "server_info_echo": {}, "failure": None, "unit_sha256": "ab" * 32}  # fmt: skip
    out = outcome_from_run(runner_status="successful", rc=0, report=report, events=[], wall_s=5.0, artifacts=None)
    assert out.ok and out.status == "ready" and out.time_to_ready_s == 3.2 and out.unit_sha256 == "ab" * 32


def test_failed_start_carries_report_reason_task_message_and_journal() -> None:
    report = {
        "status": "rolled_back",
        "failure": {"reason": "the engine exited during startup: unit failed/failed", "journal": ["a", "b"]},
    }
    events = [
        _event("runner_on_failed", "Probe", "ignored", ignore_errors=True),
        _event("runner_on_failed", "Wait until the new invocation is ready", "sglang: CUDA out of memory"),
    ]
    out = outcome_from_run(runner_status="failed", rc=2, report=report, events=events, wall_s=1.0, artifacts=None)
    assert not out.ok
    assert out.failure_class == "failed_to_start"
    assert out.status == "rolled_back"
    assert "unit failed/failed" in out.reason  # type: ignore[operator]
    assert "task 'Wait until the new invocation is ready' on h1 failed: sglang: CUDA out of memory" in out.reason  # type: ignore[operator]
    assert "ignored" not in out.reason  # type: ignore[operator]
    assert out.journal == ["a", "b"]


def test_validation_task_failure_is_invalid_config() -> None:
    events = [_event("runner_on_failed", "Validate", "topk=9 is out of range", action="ddtree_validate")]
    out = outcome_from_run(runner_status="failed", rc=2, report=None, events=events, wall_s=1.0, artifacts=None)
    assert out.failure_class == "invalid_config"
    assert "topk=9 is out of range" in out.reason  # type: ignore[operator]


def test_no_report_and_no_event_still_has_a_reason() -> None:
    out = outcome_from_run(runner_status="failed", rc=4, report=None, events=[], wall_s=1.0, artifacts=None)
    assert out.reason == "the play ended with status=failed rc=4 and wrote no report"
    unreachable = [_event("runner_on_unreachable", "Gathering Facts", "Failed to connect")]
    out = outcome_from_run(runner_status="failed", rc=4, report=None, events=unreachable, wall_s=1.0, artifacts=None)
    assert "unreachable: Failed to connect" in out.reason  # type: ignore[operator]


def test_canceled_run() -> None:
    out = outcome_from_run(runner_status="canceled", rc=254, report=None, events=[], wall_s=1.0, artifacts=None)
    assert out.status == "canceled" and not out.ok


def test_failed_task_messages_skip_ok_events() -> None:
    events = [{"event": "runner_on_ok", "event_data": {"res": {"msg": "fine"}}}]
    assert failed_task_messages(events) == []


PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Build the report
      ansible.builtin.set_fact:
        report:
          status: "{{ 'failed' if (sim_fault | default('')) == 'crash-on-load' else 'ready' }}"
          changed: true
          time_to_ready_s: 1.5
          invocation_id: inv-1
          main_pid: 42
          server_info_echo: {budget: "{{ budget | default(none) }}", window: "{{ window | default(none) }}"}
          failure: >-
            {{ {'reason': 'the engine exited during startup', 'journal': ['j1', 'j2']}
               if (sim_fault | default('')) == 'crash-on-load' else none }}
          unit_sha256: "{{ 'f' * 64 }}"
    - name: Publish the report as play stats (as the role does)
      ansible.builtin.set_stats:
        data:
          sglang_service_reports: "{{ {inventory_hostname: report | combine({'invocation_id': 'inv-stats'})} }}"
        per_host: false
        aggregate: true
    - name: Write the report
      ansible.builtin.copy:
        dest: "{{ sglang_service_report_path }}"
        content: "{{ report | to_json }}"
    - name: Wait until the new invocation is ready
      ansible.builtin.fail:
        msg: "sglang-k26-ddtree: the engine exited during startup (exit code 1)"
      when: (sim_fault | default('')) == 'crash-on-load'
"""


class _RunResult:
    """What ``ansible_runner.run`` returns, as far as the reconfigurer reads it."""

    def __init__(self, private: str, status: str = "successful", rc: int = 0) -> None:
        self.status, self.rc = status, rc
        self.config = type("C", (), {"artifact_dir": str(Path(private) / "artifacts" / "x")})()


@pytest.fixture
def fake_bundle(tmp_path: Path) -> tuple[Path, Target]:
    bundle = tmp_path / "bundle"
    (bundle / "playbooks").mkdir(parents=True)
    (bundle / "playbooks" / "reconfigure.yml").write_text(PLAY, encoding="utf-8")
    inventory = bundle / "hosts.ini"
    inventory.write_text(
        f"testhost ansible_connection=local ansible_python_interpreter={sys.executable}\n", encoding="utf-8"
    )
    target = Target(
        inventory=inventory, host="testhost", hostvars={}, endpoint=Endpoint("http://127.0.0.1:1"),
        engine_kind="simulated",
    )  # fmt: skip
    return bundle, target


def test_ansible_runner_call_with_extravars_events_and_report(
    tmp_path: Path, fake_bundle: tuple[Path, Target]
) -> None:
    """One real run (ansible-playbook is slow to start; the ok path is covered by outcome_from_run)."""
    bundle, target = fake_bundle
    rec = AnsibleReconfigurer(bundle, target)
    bad_cfg = validate_config(
        {"budget": 8, "topk": 4, "window": "none", "sim_fault": "crash-on-load"}, simulated=True
    )
    run = tmp_path / "results" / "r1" / "runner"

    out = rec.reconfigure(bad_cfg, run / bad_cfg.label, threading.Event())
    assert out.server_info_echo == {"budget": 8, "window": "none"}  # extra vars arrive typed
    assert out.invocation_id == "inv-stats"  # the report read is the one in the play's stats
    artifacts = run / bad_cfg.label / "artifacts"
    assert list(artifacts.glob("*/job_events/*.json")), "runner events are kept"
    assert out.artifacts is not None and out.artifacts.startswith("runner/")
    assert not out.ok
    assert out.failure_class == "failed_to_start"
    assert "the engine exited during startup" in out.reason  # type: ignore[operator]
    assert "task 'Wait until the new invocation is ready'" in out.reason  # type: ignore[operator]
    assert out.journal == ["j1", "j2"]
    report = json.loads((run / bad_cfg.label / "reconfigure-report.json").read_text())
    assert report["status"] == "failed"


def test_rescue_fail_repeating_the_reason_is_not_repeated() -> None:
    report = {
        "status": "rolled_back",
        "failure": {"reason": "the engine exited during startup: unit failed", "journal": []},
    }
    events = [
        _event("runner_on_failed", "Wait until ready", "sglang-x: the engine exited during startup: unit failed"),
        _event("runner_on_failed", "Fail with the reason", "did not become ready: the engine exited during startup: "
               "unit failed\nLast journal lines:\nline 1\nline 2"),
    ]  # fmt: skip
    out = outcome_from_run(runner_status="failed", rc=2, report=report, events=events, wall_s=1.0, artifacts=None)
    assert out.reason == "the engine exited during startup: unit failed [task 'Wait until ready' on h1]"


def test_a_problem_list_message_keeps_its_items() -> None:
    msg = "Validation of arguments failed:\nargument 'x' is of type NoneType\nvalue of y must be one of: 8, 16"
    events = [_event("runner_on_failed", "Validating arguments", msg, action="ansible.builtin.validate_argument_spec")]
    out = outcome_from_run(runner_status="failed", rc=2, report=None, events=events, wall_s=1.0, artifacts=None)
    assert out.failure_class == "invalid_config"
    assert (
        out.reason
        == "task 'Validating arguments' on h1 failed: Validation of arguments failed: argument 'x' is of type NoneType"
    )


def _record_plays(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """Replace ansible_runner.run by a play that reports ready; the extra vars of each play, in order."""
    seen: list[dict[str, object]] = []

    def fake_run(**kwargs: object) -> _RunResult:
        extravars = kwargs["extravars"]
        assert isinstance(extravars, dict)
        seen.append(dict(extravars))
        Path(str(extravars["sglang_service_report_path"])).write_text(json.dumps({"status": "ready"}))
        return _RunResult(str(kwargs["private_data_dir"]))

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    return seen


def test_extra_vars_go_to_every_play_but_the_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bundle: tuple[Path, Target]
) -> None:
    seen = _record_plays(monkeypatch)
    bundle, target = fake_bundle
    rec = AnsibleReconfigurer(bundle, target, extra_vars={"sglang_service_sim_speed": 10, "budget": 99})
    cfg = validate_config({"budget": 8, "topk": 4}, simulated=True)
    assert rec.reconfigure(cfg, tmp_path / "a", threading.Event()).ok
    assert rec.reconfigure(cfg, tmp_path / "b", threading.Event(), restore=True).ok
    assert seen[0]["sglang_service_sim_speed"] == 10 and seen[0]["budget"] == 8  # the config's keys win
    assert "sglang_service_sim_speed" not in seen[1]


def test_a_grid_entrys_extra_vars_go_to_its_own_play_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bundle: tuple[Path, Target]
) -> None:
    seen = _record_plays(monkeypatch)
    bundle, target = fake_bundle
    rec = AnsibleReconfigurer(bundle, target, extra_vars={"sglang_service_ready_timeout": 900})
    slow = validate_config(
        {"budget": 8, "topk": 4, "extra_vars": {"sglang_service_ready_timeout": 2400}}, simulated=True
    )
    plain = validate_config({"budget": 16, "topk": 4}, simulated=True)
    assert slow.label == validate_config({"budget": 8, "topk": 4}, simulated=True).label
    assert rec.reconfigure(slow, tmp_path / "a", threading.Event()).ok
    assert rec.reconfigure(plain, tmp_path / "b", threading.Event()).ok
    assert seen[0]["sglang_service_ready_timeout"] == 2400  # the entry's own value beats --extra-var
    assert seen[1]["sglang_service_ready_timeout"] == 900


def _stats_event(host: str, report: dict[str, object]) -> dict[str, object]:
    """A ``playbook_on_stats`` event as ansible-runner writes it (set_stats data in ``artifact_data``)."""
    return {
        "event": "playbook_on_stats",
        "counter": 9,
        "event_data": {"ok": {host: 3}, "failures": {}, "artifact_data": {"sglang_service_reports": {host: report}}},
    }


def test_the_report_comes_from_the_play_stats_before_the_side_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bundle: tuple[Path, Target]
) -> None:
    stats_report = {"status": "ready", "changed": True, "time_to_ready_s": 2.5, "invocation_id": "from-stats",
                    "main_pid": 11, "server_info_echo": {"budget": 8}, "failure": None}  # fmt: skip

    def fake_run(**kwargs: object) -> _RunResult:
        result = _RunResult(str(kwargs["private_data_dir"]))
        events = Path(result.config.artifact_dir) / "job_events"
        events.mkdir(parents=True)
        (events / "9-stats.json").write_text(json.dumps(_stats_event("testhost", stats_report)), encoding="utf-8")
        extravars = kwargs["extravars"]
        assert isinstance(extravars, dict)
        side = {"status": "failed", "invocation_id": "from-file", "failure": {"reason": "stale"}}
        Path(str(extravars["sglang_service_report_path"])).write_text(json.dumps(side), encoding="utf-8")
        return result

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    bundle, target = fake_bundle
    cfg = validate_config({"budget": 8, "topk": 4}, simulated=True)
    out = AnsibleReconfigurer(bundle, target).reconfigure(cfg, tmp_path / "a", threading.Event())
    assert out.ok and out.invocation_id == "from-stats" and out.time_to_ready_s == 2.5
    # the new process's echo reaches the per-config result (it was carried along, then dropped)
    assert out.as_result()["server_info_echo"] == {"budget": 8}


def test_the_side_file_serves_when_the_play_has_no_stats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bundle: tuple[Path, Target]
) -> None:
    def fake_run(**kwargs: object) -> _RunResult:
        extravars = kwargs["extravars"]
        assert isinstance(extravars, dict)
        side = {"status": "ready", "invocation_id": "from-file", "failure": None}
        Path(str(extravars["sglang_service_report_path"])).write_text(json.dumps(side), encoding="utf-8")
        return _RunResult(str(kwargs["private_data_dir"]), status="canceled", rc=254)

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    bundle, target = fake_bundle
    cfg = validate_config({"budget": 8, "topk": 4}, simulated=True)
    out = AnsibleReconfigurer(bundle, target).reconfigure(cfg, tmp_path / "a", threading.Event())
    assert out.status == "canceled" and out.invocation_id == "from-file"
