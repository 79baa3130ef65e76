"""The JIT check's result assert (roles/preflight/tasks/jit.yml) on results the check can give: Ansible
templates fail_msg and success_msg both, so a partial result (a check that failed or never ran) must still
give nvcc's error, not a templating error about a missing field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from install_helpers import ROOT
from test_install_roles import needs_ansible, playbook

JIT_TASKS = ROOT / "roles" / "preflight" / "tasks" / "jit.yml"
NAME = "Check the JIT compile result"


def _assert_task() -> dict[str, Any]:
    def find(tasks: list[dict[str, Any]]) -> dict[str, Any] | None:
        for task in tasks:
            if task.get("name") == NAME:
                return task
            for key in ("block", "rescue", "always"):
                found = find(task.get(key) or [])
                if found is not None:
                    return found
        return None

    task = find(yaml.safe_load(JIT_TASKS.read_text()))
    assert task is not None, f"no task {NAME!r} in {JIT_TASKS}"
    return task


def _run(tmp_path: Path, result: dict[str, Any], *, pending: bool = False) -> str:
    """The assert on `result`, as the check's output from the start's own round trip, or (`pending`) from the
    async job that waited for a check still compiling when the start's wait ended."""
    (tmp_path / "assert.yml").write_text(yaml.safe_dump([_assert_task()], sort_keys=False))
    rc = 0 if result.get("ok") else 1
    run = {"rc": rc, "stdout": json.dumps({"rc": rc, "stdout": json.dumps(result)})}
    start = {"rc": 0, "stdout": json.dumps({"pending": True})} if pending else run
    job = run if pending else {"skipped": True, "changed": False}
    play = [{"name": "The JIT result assert", "hosts": "localhost", "gather_facts": False,
             "vars": {"preflight_jit_unit_path": "/etc/systemd/system/sglang.service",
                      "_preflight_jit_pending": pending, "_preflight_jit_sync": start, "_preflight_jit_async": job},
             "tasks": [{"name": "The real task", "ansible.builtin.include_tasks": "assert.yml"}]}]
    proc = playbook(tmp_path, yaml.safe_dump(play, sort_keys=False))
    return " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.parametrize("pending", [False, True], ids=["in-the-start", "after-the-async-job"])
@needs_ansible
def test_a_failed_check_with_a_check_that_never_ran_reports_nvcc_s_error(tmp_path: Path, pending: bool) -> None:
    """curand_kernel.h removed: FlashInfer's build fails and sglang's sampling.cuh never runs (no target, no
    ok); the failure names the compiler's error (the host check jit-without-curand looks for it), whether the
    check ended within the start's round trip or the async job waited for it."""
    out = _run(tmp_path, pending=pending, result={"ok": False, "reason": "a compile failed", "checks": {
        "triton_driver_c": {"ok": True, "seconds": 1.2, "libcuda": "/usr/lib/libcuda.so.1"},
        "flashinfer_sampling_cu": {"ok": False, "output": "sampling.cu:3: curand_kernel.h: No such file or directory"},
        "sglang_speculative_sampling": {},
    }})  # fmt: skip
    assert "JIT check failed in the sandbox of sglang.service" in out, out
    assert "[flashinfer_sampling_cu]" in out and "curand_kernel.h: No such file or directory" in out, out
    assert "has no attribute" not in out, out
    assert "failed=1" in out, out


@pytest.mark.parametrize("checks", [{}, {"triton_driver_c": {"ok": True, "seconds": 1.0, "libcuda": "x"}}])
@needs_ansible
def test_a_passing_result_with_fields_missing_still_passes(tmp_path: Path, checks: dict[str, Any]) -> None:
    out = _run(tmp_path, {"ok": True, "user": "sglang", "arch": "12.0", "cuda_home": "/opt/cuda", "checks": checks})
    assert "JIT check passed as uid sglang (arch 12.0, CUDA_HOME /opt/cuda)" in out, out
    assert "has no attribute" not in out and "failed=0" in out, out
