"""Unit tests of the host-side modules' decision logic (no systemd needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, load_module

pytest.importorskip("ansible")

wait = load_module("sglang_wait_ready", ROOT / "roles/sglang_service/library/sglang_wait_ready.py")
stop = load_module("sglang_stop_wait", ROOT / "roles/sglang_service/library/sglang_stop_wait.py")
lock = load_module("sglang_deploy_lock", ROOT / "roles/sglang_service/library/sglang_deploy_lock.py")
plugin = load_module("ddtree_validate_plugin", ROOT / "plugins/action/ddtree_validate.py")


def state(previous="old"):
    return {"require_new": True, "previous": previous, "invocation": None}


def props(**kw):
    base = {"ActiveState": "active", "SubState": "running", "MainPID": "42", "InvocationID": "new", "Result": "success"}
    return {**base, **kw}


def test_old_invocation_is_never_ready():
    st = state()
    with pytest.raises(wait.NotReady):
        wait.check_unit(props(InvocationID="old"), st)
    assert st["invocation"] is None


def test_failed_without_new_invocation_fails_at_once():
    with pytest.raises(wait.EngineFailed, match="no new invocation"):
        wait.check_unit(props(InvocationID="old", ActiveState="failed", SubState="failed"), state())


@pytest.mark.parametrize(
    ("active", "sub"), [("activating", "auto-restart"), ("failed", "failed"), ("inactive", "dead")]
)
def test_exit_of_the_new_invocation_fails_at_once(active, sub):
    with pytest.raises(wait.EngineFailed, match="exited") as exc:
        wait.check_unit(props(ActiveState=active, SubState=sub, Result="exit-code"), state())
    assert exc.value.invocation_id == "new"


def test_a_restart_during_startup_is_a_failure():
    st = state()
    wait.check_unit(props(InvocationID="first"), st)
    with pytest.raises(wait.EngineFailed, match="restarted"):
        wait.check_unit(props(InvocationID="second"), st)


def test_probe_without_restart_accepts_the_running_invocation():
    st = {"require_new": False, "previous": "", "invocation": None}
    wait.check_unit(props(InvocationID="same"), st)
    assert st["invocation"] == "same"


def test_echo_comparison_names_each_mismatch():
    info = {"speculative_ddtree_budget": 8, "speculative_draft_window_size": None, "speculative_algorithm": "DFLASH"}
    assert wait.compare_echo(info, {"speculative_ddtree_budget": 8, "speculative_algorithm": "DFLASH"}) == []
    assert wait.compare_echo(info, {"speculative_ddtree_budget": "8"}) == []
    problems = wait.compare_echo(info, {"speculative_ddtree_budget": 12, "speculative_draft_window_size": 2048})
    assert problems == [
        "speculative_ddtree_budget: configured 12, server reports 8",
        "speculative_draft_window_size: configured 2048, server reports None",
    ]


def test_start_time_is_monotonic_seconds():
    assert wait.start_monotonic({"ExecMainStartTimestampMonotonic": "2500000"}) == 2.5
    assert wait.start_monotonic({"ExecMainStartTimestampMonotonic": "0"}) is None


def test_alive_ignores_missing_pids(tmp_path: Path):
    assert stop.alive(2**22 + 12345) is False


def test_merge_keeps_explicit_and_drops_unused_defaults():
    defaults = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}
    assert plugin.merge_short_keys({"budget": "12", "topk": None}, defaults) == {
        "algorithm": "ddtree",
        "budget": "12",
        "topk": 4,
        "window": 2048,
        "block_size": 8,
    }
    assert plugin.merge_short_keys({"algorithm": "dflash"}, defaults) == {
        "algorithm": "dflash",
        "window": 2048,
        "block_size": 8,
    }
    assert plugin.merge_short_keys({"algorithm": "none"}, defaults) == {"algorithm": "none"}
    assert plugin.merge_short_keys({"algorithm": "dflash", "budget": 8}, defaults)["budget"] == 8


def test_lock_is_exclusive_and_released_only_by_its_owner(tmp_path: Path):
    path = tmp_path / "run" / "unit.lock"
    assert lock.acquire(path, "a", timeout=1, stale_after=60, poll=0.01)["took_over"] is None
    with pytest.raises(TimeoutError, match="owner a"):
        lock.acquire(path, "b", timeout=0.05, stale_after=60, poll=0.01)
    assert lock.release(path, "b") is False and path.exists()
    assert lock.acquire(path, "a", timeout=1, stale_after=60, poll=0.01).get("already_held") is True
    assert lock.release(path, "a") is True and not path.exists()
    assert lock.acquire(path, "b", timeout=1, stale_after=60, poll=0.01)["waited_s"] < 1


def test_abandoned_lock_is_taken_over(tmp_path: Path):
    path = tmp_path / "unit.lock"
    path.write_text('{"owner": "gone", "acquired_at": 0}')
    result = lock.acquire(path, "new", timeout=1, stale_after=60, poll=0.01)
    assert result["took_over"]["owner"] == "gone"
    assert lock.read_holder(path)["owner"] == "new"
