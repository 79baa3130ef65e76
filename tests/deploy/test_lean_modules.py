"""The modules of the lean reconfigure: each does in one round trip what several tasks did.

Run as Ansible runs them (``main()`` with module args, the JSON result read back),
with the host side (systemctl, HTTP, nvidia-smi) replaced where this machine has
none. What they replace: the unit show + fingerprint + record read + pre-checks
(``sglang_unit_state``), the install + daemon-reload + enable + reset-failed +
start (``sglang_unit_install``), the last-good copies + record write
(``sglang_deploy_record``), the three version reads + toolchain look
(``preflight_stack_versions``), the JIT check install + unit look
(``preflight_jit_install``), the device find + nvidia-smi count
(``preflight_gpu_devices``), the stamp + drafter + modprobe reads
(``sglang_host_read``), a delegated copy of the report (``controller_json_write``),
and the poll rounds of a quick stop or start (``sync_limit``/``resume``).
"""

from __future__ import annotations

import grp
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import ROOT, load_module

pytest.importorskip("ansible")
from ansible.module_utils.testing import patch_module_args

LIB = ROOT / "plugins/modules"
PRE_LIB = ROOT / "plugins/modules"
files = load_module("sglang_files", ROOT / "plugins/module_utils/sglang_files.py")
precheck = load_module("sglang_precheck_utils", ROOT / "plugins/module_utils/sglang_precheck.py")
unit_state = load_module("sglang_unit_state", LIB / "sglang_unit_state.py")
record = load_module("sglang_deploy_record", LIB / "sglang_deploy_record.py")
host_read = load_module("sglang_host_read", LIB / "sglang_host_read.py")
stop = load_module("sglang_stop_wait_lean", LIB / "sglang_stop_wait.py")
wait = load_module("sglang_wait_ready_lean", LIB / "sglang_wait_ready.py")
versions = load_module("preflight_stack_versions", PRE_LIB / "preflight_stack_versions.py")
devices = load_module("preflight_gpu_devices", PRE_LIB / "preflight_gpu_devices.py")
jit_install = load_module("preflight_jit_install", PRE_LIB / "preflight_jit_install.py")
json_write = load_module("controller_json_write", ROOT / "plugins/action/controller_json_write.py")

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="writes files owned by root, as the module does on a host")


def run(module: ModuleType, args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The module's result, as Ansible reads it (exit_json and fail_json both print it and exit)."""
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


# ---- shared file helpers ----------------------------------------------------------------------------


@as_root
def test_files_are_written_atomically_and_only_when_something_differs(tmp_path: Path):
    dest = tmp_path / "unit.service"
    assert files.write_file(dest, b"a\n", 0o644) is True
    assert files.write_file(dest, b"a\n", 0o644) is False  # same content, mode, owner
    assert files.write_file(dest, b"a\n", 0o600) is True  # the mode alone
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    assert files.sha256_of(tmp_path / "absent") == "none"
    assert files.remove_file(dest) is True and files.remove_file(dest) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary file left behind


# ---- sglang_unit_state: one read for the restart decision and the pre-checks -----------------------


@pytest.mark.parametrize(("text", "expected"), [(None, {}), ("{", {}), ("[1]", {}), ('{"port": 1}', {"port": 1})])
def test_an_unreadable_record_reads_as_none(tmp_path: Path, text: str | None, expected: dict):
    path = tmp_path / "record.json"
    if text is not None:
        path.write_text(text)
    assert unit_state.read_record(path) == expected


def test_the_unit_state_read_returns_fingerprints_record_and_precheck_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    props = {"ActiveState": "active", "SubState": "running", "MainPID": "42", "InvocationID": "abc"}
    monkeypatch.setattr(unit_state, "unit_show", lambda unit, wanted: {k: props[k] for k in wanted})
    staged = tmp_path / "staged.service"
    staged.write_text("[Unit]\n")
    (tmp_path / "record.json").write_text('{"label": "ddtree-b8"}')
    out = run(unit_state, {
        "unit": "sglang-x",
        "files": {"staged_unit": str(staged), "installed_unit": str(tmp_path / "none.service")},
        "record_path": str(tmp_path / "record.json"),
        "precheck": {"port": 1, "host": "127.0.0.1", "files": {str(tmp_path / "venv/bin/python"): "the venv"}},
    }, capsys)  # fmt: skip
    assert out["state"] == props and out["record"] == {"label": "ddtree-b8"}
    assert out["sha256"] == {"staged_unit": files.sha256_of(staged), "installed_unit": "none"}
    assert out["problems"] == [f"{tmp_path}/venv/bin/python does not exist (the venv)"]
    assert out.get("failed") is not True  # problems refuse a restart only: the role decides


def test_without_a_precheck_there_are_no_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(unit_state, "unit_show", lambda unit, wanted: {})
    out = run(unit_state, {"unit": "u", "record_path": str(tmp_path / "r.json")}, capsys)
    assert out["problems"] == [] and out["state"]["ActiveState"] == "" and out["record"] == {}


def test_a_gpu_precheck_without_nvidia_smi_is_a_problem_only_when_required(tmp_path: Path):
    p = {"port": 1, "host": "127.0.0.1", "files": {}, "gpus": [0], "gpu_memory_used_max_mib": 1024,
         "gpu_compute_modes_allowed": ["Default"], "nvidia_smi": str(tmp_path / "absent-smi")}  # fmt: skip
    found, details = precheck.problems("", {**p, "gpu_required": False})
    assert found == [] and details["gpu_checked"] is False
    found, _ = precheck.problems("", {**p, "gpu_required": True})
    assert found == [f"{tmp_path}/absent-smi is not installed: the GPU state cannot be checked"]


# ---- sglang_deploy_record: last good unit and keys, and the record ---------------------------------


@as_root
def test_the_deploy_record_keeps_the_last_good_files_and_forgets_stale_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    group = grp.getgrgid(os.getgid()).gr_name
    unit, keys, good = tmp_path / "x.service", tmp_path / "x.keys.json", tmp_path / "last-good"
    good.mkdir()
    unit.write_text("[Service]\n")
    keys.write_text('{"api_key": "sk-secret-4242"}')
    args = {"name": "x", "unit_path": str(unit), "keys_path": str(keys), "keys_group": group,
            "last_good_dir": str(good), "record": {"port": 31001, "label": "l"},
            "record_path": str(tmp_path / "record.json")}  # fmt: skip
    out = run(record, args, capsys)
    assert out["changed"] is True and out["unit_sha256"] == files.sha256_of(unit)
    assert (good / "x.service").read_text() == "[Service]\n"
    assert stat.S_IMODE((good / "x.keys.json").stat().st_mode) == 0o640
    assert "sk-secret-4242" not in json.dumps(out)  # no key content in the result
    assert (tmp_path / "record.json").read_text() == json.dumps({"label": "l", "port": 31001}, indent=4) + "\n"
    assert run(record, args, capsys)["changed"] is False
    keys.unlink()  # the unit uses no keys any more: the last good keys go too
    assert run(record, args, capsys)["changed"] is True and not (good / "x.keys.json").exists()


# ---- sglang_host_read ---------------------------------------------------------------------------------


def test_the_host_read_returns_text_errors_executables_and_existence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    (tmp_path / "stamp").write_text("abc\n")
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    out = run(host_read, {
        "files": {"stamp": str(tmp_path / "stamp"), "drafter": str(tmp_path / "none/config.json")},
        "executables": {"tool": str(tool), "data": str(tmp_path / "stamp")},
        "paths": {"stamp": str(tmp_path / "stamp"), "gone": str(tmp_path / "gone")},
    }, capsys)  # fmt: skip
    assert out["content"] == {"stamp": "abc\n", "drafter": None}
    assert out["errors"] == {"drafter": f"file not found: {tmp_path}/none/config.json"}
    assert out["executable"] == {"tool": True, "data": False}
    assert out["exists"] == {"stamp": True, "gone": False}


# ---- the bounded synchronous part of the stop and the readiness wait -------------------------------


def test_a_stop_that_outlasts_the_sync_limit_is_pending_then_resumed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        props = {"ActiveState": "active", "MainPID": str(old.pid), "InvocationID": "inv-old", "ControlGroup": ""}
        monkeypatch.setattr(stop, "unit_show", lambda unit, wanted: props)
        calls: list[list[str]] = []

        def systemctl(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
            calls.append(argv)  # the stop returns at once; the old process lingers (a drain)
            return subprocess.CompletedProcess(argv, 0, "", "")

        monkeypatch.setattr(stop.subprocess, "run", systemctl)
        args = {"unit": "u", "port": 1, "timeout": 30, "poll_interval": 0.05}
        first = run(stop, {**args, "sync_limit": 0.3}, capsys)
        assert first["pending"] is True and first["old_invocation_id"] == "inv-old"
        assert first["resume"]["result"]["old_pids"] == [old.pid] and first.get("failed") is not True
        old.kill()
        old.wait()
        rest = run(stop, {**args, "resume": first["resume"]}, capsys)
        assert "pending" not in rest and rest.get("failed") is not True
        assert rest["old_invocation_id"] == "inv-old" and rest["gone_s"] >= first["waited_s"]
        assert calls == [["systemctl", "stop", "u"]] * 2  # the rest joins the stop job, it does not start another
    finally:
        old.kill()


def _ready_host(monkeypatch: pytest.MonkeyPatch, invocation: list[str], up: list[bool]) -> None:
    monkeypatch.setattr(wait, "unit_show", lambda unit, wanted: {
        "ActiveState": "active", "SubState": "running", "MainPID": "7", "InvocationID": invocation[0]})  # fmt: skip
    monkeypatch.setattr(wait, "journal", lambda *a: [])

    def http(method: str, url: str, api_key: str, body: object = None, timeout: float = 30.0) -> tuple[int, bytes]:
        if not up[0]:
            raise wait.NotReady(f"{method} {url}: connection refused")
        if url.endswith("/generate"):
            return 200, b'{"text": "Paris"}'
        if url.endswith("/v1/chat/completions"):
            return 200, b'{"choices": [{"message": {"content": " 2, 3, 5"}}], "usage": {"completion_tokens": 6}}'
        return 200, b"{}"

    monkeypatch.setattr(wait, "http", http)


def test_a_start_that_outlasts_the_sync_limit_is_pending_then_resumed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    invocation, up = ["inv-new"], [False]
    _ready_host(monkeypatch, invocation, up)
    args = {"unit": "u", "port": 1, "previous_invocation_id": "inv-old", "timeout": 30, "poll_interval": 0.05}
    started = time.monotonic()
    first = run(wait, {**args, "sync_limit": 0.3}, capsys)
    assert time.monotonic() - started < 5
    assert first["pending"] is True and first["ready"] is False and first["resume"]["invocation"] == "inv-new"
    up[0] = True
    rest = run(wait, {**args, "resume": first["resume"]}, capsys)
    assert rest["ready"] is True and rest["invocation_id"] == "inv-new" and rest["waited_s"] >= first["waited_s"]


def test_the_ready_echo_holds_the_contract_s_keys_it_is_given(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """The contract's /server_info keys come in as echo_keys (ddtree_validate's); the module adds its own."""
    _ready_host(monkeypatch, ["inv-new"], [True])
    plain_http = wait.http
    info = {"speculative_algorithm": "DFLASH", "speculative_ddtree_budget": None, "speculative_num_draft_tokens": 8,
            "speculative_eagle_topk": 1, "port": 1}  # fmt: skip

    def http(method: str, url: str, api_key: str, body: object = None, timeout: float = 30.0) -> tuple[int, bytes]:
        return (200, json.dumps(info).encode()) if url.endswith("/server_info") else plain_http(method, url, api_key)

    monkeypatch.setattr(wait, "http", http)
    args = {"unit": "u", "port": 1, "previous_invocation_id": "inv-old", "timeout": 30, "poll_interval": 0.05}
    keys = ["speculative_algorithm", "speculative_ddtree_budget", "speculative_draft_window_size"]
    out = run(wait, {**args, "echo_keys": keys}, capsys)
    assert out["server_info_echo"] == {"speculative_algorithm": "DFLASH", "speculative_ddtree_budget": None,
                                       "speculative_num_draft_tokens": 8, "port": 1}  # fmt: skip
    assert run(wait, args, capsys)["server_info_echo"] == {"speculative_num_draft_tokens": 8, "port": 1}


def test_a_restart_between_the_two_parts_of_the_wait_is_a_failure(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    invocation, up = ["inv-new"], [False]
    _ready_host(monkeypatch, invocation, up)
    args = {"unit": "u", "port": 1, "previous_invocation_id": "inv-old", "timeout": 30, "poll_interval": 0.05}
    first = run(wait, {**args, "sync_limit": 0.3}, capsys)
    invocation[0], up[0] = "inv-again", True  # the engine crashed and systemd restarted it meanwhile
    rest = run(wait, {**args, "resume": first["resume"]}, capsys)
    assert rest["failed"] is True and "restarted during startup (invocation inv-new -> inv-again" in rest["msg"]


# ---- preflight: the version reads, the local facts, the device nodes, the JIT check install ------------


def test_local_facts_are_read_as_the_setup_module_reads_them(tmp_path: Path):
    assert versions.parse_fact('{"a": 1}') == {"a": 1}
    ini = "# Ansible managed\n[toolkit]\ncuda_home=/opt/cuda\nversion=13.0.3\n"
    assert versions.parse_fact(ini) == {"toolkit": {"cuda_home": "/opt/cuda", "version": "13.0.3"}}
    (tmp_path / "cuda_toolkit.fact").write_text(ini)
    (tmp_path / "broken.fact").write_text("no section header")
    facts = versions.local_facts(tmp_path)
    assert facts["cuda_toolkit"]["toolkit"]["cuda_home"] == "/opt/cuda"
    assert facts["broken"].startswith("error loading fact")


def test_the_version_reads_name_an_interpreter_that_cannot_run(tmp_path: Path):
    reads = versions.venv_reads(str(tmp_path / "venv/bin/python"), torch=True, toolchain=False)
    assert set(reads) == {"sglang", "torch"}
    assert all(r["rc"] != 0 and f"{tmp_path}/venv/bin/python" in r["stderr"] for r in reads.values())


def test_the_version_reads_run_the_interpreter_once_for_all(tmp_path: Path):
    reads = versions.venv_reads(sys.executable, torch=False, toolchain=True)
    assert set(reads) == {"sglang", "toolchain"}
    assert set(json.loads(reads["toolchain"]["stdout"])) == {"gcc", "c++", "Python.h", "ninja", "include"}


def test_the_device_listing_tells_character_devices_from_the_rest(tmp_path: Path):
    (tmp_path / "nvidia0").write_text("")
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "other").write_text("")
    assert devices.nodes(tmp_path) == [
        {"path": f"{tmp_path}/nvidia-caps", "ischr": False},
        {"path": f"{tmp_path}/nvidia0", "ischr": False},
    ]
    assert devices.smi_indices(str(tmp_path / "absent-smi"))["rc"] == 3


@as_root
def test_the_jit_check_is_installed_once_and_the_unit_looked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    args = {"dest": str(tmp_path / "libexec/check.py"), "content": "print('ok')\n",
            "unit_path": str(tmp_path / "u.service")}  # fmt: skip
    first = run(jit_install, args, capsys)
    assert first["changed"] is True and first["unit_exists"] is False
    assert stat.S_IMODE((tmp_path / "libexec/check.py").stat().st_mode) == 0o755
    (tmp_path / "u.service").write_text("")
    again = run(jit_install, args, capsys)
    assert again["changed"] is False and again["unit_exists"] is True


def test_the_controller_report_is_written_atomically(tmp_path: Path):
    dest = tmp_path / "reports/r.json"
    json_write.write_json(dest, {"b": 1, "a": [1, 2]}, 0o644)
    json_write.write_json(dest, {"status": "ready"}, 0o644)
    assert dest.read_text() == json.dumps({"status": "ready"}, indent=4) + "\n"
    assert [p.name for p in dest.parent.iterdir()] == ["r.json"]


def test_a_slow_request_does_not_outlast_the_sync_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    """A generation that hangs (a kernel build) is cut at the limit: pending, and the async rest goes on."""
    _ready_host(monkeypatch, ["inv-new"], [True])
    asked: list[float] = []

    def hanging(method: str, url: str, api_key: str, body: object = None, timeout: float = 30.0) -> tuple[int, bytes]:
        if url.endswith("/generate"):
            asked.append(timeout)
            time.sleep(min(timeout, 20.0))  # the server answers only after the client gave up
            raise wait.NotReady(f"{method} {url}: timed out")
        return 200, b"{}"

    monkeypatch.setattr(wait, "http", hanging)
    args = {"unit": "u", "port": 1, "previous_invocation_id": "inv-old", "timeout": 300, "poll_interval": 0.05}
    started = time.monotonic()
    out = run(wait, {**args, "sync_limit": 0.5}, capsys)
    assert out["pending"] is True and out["phase"] == "generate"
    assert time.monotonic() - started < 5 and asked and max(asked) <= 1.0
