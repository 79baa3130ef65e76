"""A failed start is attributed to its own invocation's journal lines, and its cause is named."""

from __future__ import annotations

import subprocess

import pytest
from conftest import ROOT, load_module

pytest.importorskip("ansible")

wait = load_module("sglang_wait_ready", ROOT / "plugins/modules/sglang_wait_ready.py")
failure = load_module("sglang_failure", ROOT / "plugins/module_utils/sglang_failure.py")

STATE = "the engine exited during startup: unit activating/auto-restart, Result=exit-code, ExecMainStatus=1"
OOM = [
    "2026-01-01T10:00:00 host sglang[7]: [2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent",
    '2026-01-01T10:00:00 host sglang[7]:   File "x.py", line 1, in <simulated cuda graph capture>',
    "2026-01-01T10:00:00 host sglang[7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
]
CRASH_ON_LOAD = [
    "2026-01-01T10:00:00 host sglang[7]: [2026-01-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent",
    "2026-01-01T10:00:00 host sglang[7]: RuntimeError: SIMULATED fault crash-on-load: the model load failed",
]
IMPORT = ["host sglang[7]: ModuleNotFoundError: No module named 'sgl_kernel'"]
PORT = [
    "host sglang[7]: ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30001): "
    "address already in use"
]


@pytest.mark.parametrize(
    ("lines", "key", "words"),
    [
        (OOM, "out_of_memory", "out of memory on a GPU"),
        (CRASH_ON_LOAD, "simulated_fault", "the simulated engine's injected fault crash-on-load"),
        (IMPORT, "import_error", "a Python module could not be imported"),
        (PORT, "port_in_use", "the port is already in use"),
        (
            ["host sglang[7]: RuntimeError: SIMULATED fault crash-after:20: the scheduler died"],
            "simulated_fault",
            "the simulated engine's injected fault crash-after:20",
        ),
    ],
)
def test_the_cause_is_named_in_plain_words(lines, key, words):
    found = failure.cause(lines)
    assert found is not None and found[0] == key and found[1] == words


def test_out_of_memory_and_a_crash_on_load_get_different_reasons_with_the_state_after_them():
    oom = failure.explain(STATE, OOM)
    crash = failure.explain(STATE, CRASH_ON_LOAD)
    assert oom != crash
    assert oom.startswith("out of memory on a GPU (torch.OutOfMemoryError: CUDA out of memory")
    assert crash.startswith("the simulated engine's injected fault crash-on-load")
    for text in (oom, crash):
        assert text.endswith("; systemd: " + STATE)


def test_no_known_cause_keeps_the_state_and_says_so():
    assert failure.explain(STATE, ["host sglang[7]: loading shards 3/64"]) == (
        STATE + " (no known cause in the journal lines of this invocation)"
    )
    assert failure.explain(STATE, []) == STATE


def test_the_journal_is_selected_by_the_failed_invocation():
    cmd = wait.journal_command("sglang.service", "abc123", 40, 1700000000)
    assert "_SYSTEMD_INVOCATION_ID=abc123" in cmd and "INVOCATION_ID=abc123" in cmd
    assert "-u" not in cmd


def test_without_a_new_invocation_only_lines_since_the_wait_began_are_read():
    cmd = wait.journal_command("sglang.service", "", 40, 1700000000.7)
    assert cmd[-4:] == ["-u", "sglang.service", "--since", "@1700000000"]


def test_no_new_invocation_never_reads_the_previous_invocations_lines():
    st = {"require_new": True, "previous": "old", "invocation": None}
    props = {"ActiveState": "failed", "SubState": "failed", "InvocationID": "old", "Result": "start-limit-hit"}
    with pytest.raises(wait.EngineFailed) as info:
        wait.check_unit(props, st)
    assert info.value.invocation_id == ""


def test_an_empty_invocation_match_falls_back_to_this_wait_only(monkeypatch):
    seen: list[list[str]] = []

    def fake_run(cmd, **_kw):
        seen.append(list(cmd))
        out = "" if any(c.startswith("_SYSTEMD_INVOCATION_ID=") for c in cmd) else "host sglang[7]: this start\n"
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")

    monkeypatch.setattr(wait.subprocess, "run", fake_run)
    monkeypatch.setattr(wait.time, "sleep", lambda _s: None)
    assert wait.journal("sglang.service", "abc", 40, 1700000000) == ["host sglang[7]: this start"]
    assert all("--since" in cmd for cmd in seen if "-u" in cmd)
