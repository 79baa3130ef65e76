"""Runs inside the CPU sglang venv (torch, sglang==0.5.23 --no-deps).

Collected only by tests/patches/test_ddtree_cpu_suite.py, which runs
`<venv>/bin/python -m pytest tests/patches/cpu -o python_files=check_*.py`
with DDTREE_PATCHED_TREE pointing at a pristine 0.5.23 package tree with the
series applied. Run by hand the same way; without DDTREE_PATCHED_TREE this
conftest builds a patched tree in a temporary directory first.

DDTREE_TEST_DEVICE selects the device for the kernel checks: "cpu" (default;
TRITON_INTERPRET=1 is forced so SGLang's Triton kernels run on CPU tensors)
or "cuda" (patches/tools/run-gpu-kernel-tests.sh).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
DEVICE = os.environ.get("DDTREE_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    # Must be set before triton is imported.
    os.environ["TRITON_INTERPRET"] = "1"


def _patched_tree() -> Path:
    given = os.environ.get("DDTREE_PATCHED_TREE")
    if given:
        return Path(given)
    sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))
    import series  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="ddtree-patched-"))
    atexit.register(shutil.rmtree, tmp, True)
    tree = series.patched_tree(tmp / "tree")
    os.environ["DDTREE_PATCHED_TREE"] = str(tree)
    return tree


TREE = _patched_tree()
sys.path.insert(0, str(TREE))

import sglang  # noqa: E402

if Path(sglang.__file__).resolve().parents[1] != TREE.resolve():
    raise RuntimeError(f"sglang imported from {sglang.__file__}, not from the patched tree {TREE}")

# sglang.srt.configs (pulled in by schedule_batch / memory_pool) imports
# torchvision, which has no build for the venv's torch 2.13 CPU.
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))
import cpu_import_shims  # noqa: E402

cpu_import_shims.install_torchvision_stand_in()
