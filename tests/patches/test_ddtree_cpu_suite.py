"""Runs tests/patches/cpu/check_*.py inside the CPU sglang venv.

The project venv has no torch; the CPU venv (patches/tools/make-cpu-venv.sh)
has torch 2.13.0 CPU and sglang==0.5.23 installed --no-deps. The checks
import sglang from a copy of the pristine wheel with the series applied
(DDTREE_PATCHED_TREE, first on sys.path), never from the venv's own copy.
Without the venv these tests skip, or FAIL when REPRO_REQUIRE_SGLANG_CPU=1.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

CHECKS = [
    "check_server_args.py",
    "check_ddtree_utils.py",
    "check_ddtree_device_build.py",
    "check_ddtree_sampling.py",
    "check_triton_kernels.py",
    "check_kv_reservation.py",
    "check_scheduler_path.py",
    "check_refusals.py",
    "check_static_buffers.py",
    "check_server_info_redaction.py",
]


@pytest.mark.sglang_cpu
@pytest.mark.parametrize("check", CHECKS)
def test_cpu_suite(check, cpu_python, patched_tree, tmp_path):
    env = dict(os.environ)
    env.update(
        DDTREE_PATCHED_TREE=str(patched_tree),
        DDTREE_TEST_DEVICE="cpu",
        TRITON_INTERPRET="1",
        PYTHONDONTWRITEBYTECODE="1",
        DDTREE_KERNEL_REPORT=str(tmp_path / "kernels.jsonl"),
    )
    env.pop("PYTHONPATH", None)
    cmd = [
        str(cpu_python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "-W", "ignore::pytest.PytestConfigWarning", "-o", "python_files=check_*.py",
        f"--rootdir={REPO_ROOT}", str(REPO_ROOT / "tests" / "patches" / "cpu" / check),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{check} failed in the CPU venv (rc={proc.returncode}):\n{out[-6000:]}"
    assert " passed" in out and " failed" not in out
