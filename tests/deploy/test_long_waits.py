"""Every wait that can outlast a NAT/firewall idle timeout runs as a polled async job.

A readiness wait lasts up to sglang_service_ready_timeout (20 min on the GPU
hosts); a stop drains for minutes. (The host lease never waits: a second run
is refused at once.) Run as one synchronous module, each keeps one SSH session
silent that long, and an idle timeout on the way cuts it: the play then fails
although the server is fine. As async jobs they run on the host and the
controller asks every sglang_service_async_poll seconds over a short connection.
(molecule and the test-host sweep run these tasks through the async path.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

LONG_WAITS = {"sglang_wait_ready", "sglang_stop_wait"}
TASK_FILES = sorted((ROOT / "roles").glob("*/tasks/*.yml"))


def _tasks(node: object) -> list[dict]:
    out: list[dict] = []
    if isinstance(node, list):
        for item in node:
            out += _tasks(item)
    elif isinstance(node, dict):
        out.append(node)
        for key in ("block", "rescue", "always"):
            out += _tasks(node.get(key))
    return out


def _waits() -> list[tuple[Path, dict]]:
    found = []
    for path in TASK_FILES:
        for task in _tasks(yaml.safe_load(path.read_text())):
            module = next((m for m in task if m in LONG_WAITS), None)
            gpu_wait = isinstance(task.get("sglang_gpu_state"), dict) and task["sglang_gpu_state"].get("wait") is True
            if module or gpu_wait:
                found.append((path, task))
    return found


def test_the_long_waits_are_found():
    modules = {next(m for m in t if m.startswith("sglang_")) for _, t in _waits()}
    # the GPU wait after a stop runs inside the stop's job (sglang_stop_wait gpus:), not as a job of its own
    assert modules == LONG_WAITS


def test_the_gpu_wait_after_the_stop_is_part_of_the_stop_job():
    service = _tasks(yaml.safe_load((ROOT / "roles/sglang_service/tasks/service.yml").read_text()))
    stops = [t for t in service if "sglang_stop_wait" in t and t.get("register") == "_sglang_service_stop"]
    assert len(stops) == 1 and "_sglang_service_gpu_ids" in str(stops[0]["sglang_stop_wait"]["gpus"])
    assert not [t for t in service if isinstance(t.get("sglang_gpu_state"), dict) and t["sglang_gpu_state"].get("wait")]


@pytest.mark.parametrize(("path", "task"), _waits(), ids=lambda v: v["name"] if isinstance(v, dict) else v.name)
def test_each_long_wait_is_async_and_polled(path: Path, task: dict):
    assert "async" in task and "poll" in task, f"{path.name}: '{task['name']}' runs synchronously"
    assert "sglang_service_async_poll" in str(task["poll"])
    assert "timeout" in str(task["async"]), task["async"]
