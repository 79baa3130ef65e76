"""Every wait that can outlast a NAT/firewall idle timeout runs as a polled async job.

A readiness wait lasts up to sglang_service_ready_timeout (20 min on the GPU
hosts); a stop drains for minutes. (The host lease never waits: a second run
is refused at once.) Run as one synchronous module, each keeps one SSH session
silent that long, and an idle timeout on the way cuts it: the play then fails
although the server is fine. As async jobs they run on the host and the
controller asks every sglang_service_async_poll seconds over a short connection.
The restart chain's stop and readiness wait may first wait synchronously, but
for at most sglang_service_sync_wait_s (<= 30 s): what is left goes on in the
next task, the same module resumed as a polled async job.
(molecule and the test-host sweep run these tasks through both paths.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ROOT

LONG_WAITS = {"ddtree.sglang.sglang_wait_ready", "ddtree.sglang.sglang_stop_wait"}
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
            gpu_state = task.get("ddtree.sglang.sglang_gpu_state")
            gpu_wait = isinstance(gpu_state, dict) and gpu_state.get("wait") is True
            if module or gpu_wait:
                found.append((path, task))
    return found


def test_the_long_waits_are_found():
    modules = {next(m for m in t if m.startswith("ddtree.sglang.sglang_")) for _, t in _waits()}
    # the GPU wait after a stop runs inside the stop's job (sglang_stop_wait gpus:), not as a job of its own
    assert modules == LONG_WAITS


def test_the_gpu_wait_after_the_stop_is_part_of_the_stop_job():
    service = _tasks(yaml.safe_load((ROOT / "roles/sglang_service/tasks/service.yml").read_text()))
    stop = "ddtree.sglang.sglang_stop_wait"
    stops = [t for t in service if stop in t and t.get("register") == "_sglang_service_stop_sync"]
    assert len(stops) == 1 and "_sglang_service_gpu_ids" in str(stops[0][stop]["gpus"])
    gpu_waits = [t for t in service if isinstance(t.get("ddtree.sglang.sglang_gpu_state"), dict)
                 and t["ddtree.sglang.sglang_gpu_state"].get("wait")]  # fmt: skip
    assert not gpu_waits


def _next_task(path: Path, task: dict) -> dict | None:
    """The task right after ``task`` in the same task list (block, rescue or file)."""

    def lists(node: object) -> list[list[dict]]:
        out: list[list[dict]] = []
        if isinstance(node, list):
            out.append([t for t in node if isinstance(t, dict)])
            for item in node:
                out += lists(item)
        elif isinstance(node, dict):
            for key in ("block", "rescue", "always"):
                out += lists(node.get(key))
        return out

    for siblings in lists(yaml.safe_load(path.read_text())):
        for i, sibling in enumerate(siblings):
            if sibling == task:
                return siblings[i + 1] if i + 1 < len(siblings) else None
    return None


@pytest.mark.parametrize(("path", "task"), _waits(), ids=lambda v: v["name"] if isinstance(v, dict) else v.name)
def test_each_long_wait_is_async_and_polled(path: Path, task: dict):
    module = next(m for m in task if m in LONG_WAITS)
    assert "async" in task and "poll" in task, f"{path.name}: '{task['name']}' runs synchronously"
    assert "sglang_service_async_poll" in str(task["poll"])
    assert "timeout" in str(task["async"]), task["async"]
    if "sync_limit" not in task[module]:
        assert "sync_wait_s" not in str(task["async"]), f"'{task['name']}' runs synchronously without a limit"
        return
    # a bounded synchronous first part: async only when sglang_service_sync_wait_s is 0
    assert "sglang_service_sync_wait_s" in str(task[module]["sync_limit"])
    assert "sglang_service_sync_wait_s" in str(task["async"])
    rest = _next_task(path, task)
    assert rest is not None and module in rest, f"'{task['name']}' has no async rest after it"
    assert f"{task['register']}.resume" in str(rest[module]["resume"])
    assert f"{task['register']}.pending" in str(rest["when"])
    assert "timeout" in str(rest["async"]) and "sync_wait_s" not in str(rest["async"])
    assert "sglang_service_async_poll" in str(rest["poll"])
    # the rest waits for the same thing, with the same arguments
    first = {k: v for k, v in task[module].items() if k != "sync_limit"}
    assert first == {k: v for k, v in rest[module].items() if k != "resume"}


def test_the_synchronous_part_of_a_wait_is_bounded():
    specs = yaml.safe_load((ROOT / "roles/sglang_service/meta/argument_specs.yml").read_text())
    option = specs["argument_specs"]["main"]["options"]["sglang_service_sync_wait_s"]
    resolve = yaml.safe_load((ROOT / "roles/sglang_service/tasks/resolve.yml").read_text())
    validate = next(t["ddtree.sglang.ddtree_validate"] for t in resolve if "ddtree.sglang.ddtree_validate" in t)
    bounds = validate["integers"]["sglang_service_sync_wait_s"]
    assert option["default"] <= 30 and bounds["max"] <= 30 and bounds["min"] == 0
    restart_chain = (ROOT / "roles/sglang_service/tasks/service.yml").read_text()
    assert restart_chain.count("sync_limit:") == 2  # the stop and the readiness wait
