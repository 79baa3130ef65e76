"""The GPU losslessness proof script, run end to end in its CPU dry-run mode.

patches/tools/ddtree_gpu_lossless_proof.py --dry-run builds the tiny models
and tokenizer, validates them (transformers, sglang's DFlash config parser),
builds every server command line and resolves it with the patched sglang,
then runs the client / comparison / table against CPU stand-in servers. It
needs the CPU sglang venv (transformers, tokenizers, safetensors, torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "patches" / "tools" / "ddtree_gpu_lossless_proof.py"


def _run(cpu_python: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(cpu_python), str(SCRIPT), "--dry-run", "--out", str(out), "--prompts", "16", "--max-new-tokens", "6",
           "--parallel", "3", *extra]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)


@pytest.mark.sglang_cpu
def test_dry_run_end_to_end(cpu_python, tmp_path):
    out = tmp_path / "proof"
    proc = _run(cpu_python, out, "--blocks", "8,16", "--budgets", "16")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "DRY RUN (CPU stand-in servers, not sglang)" in proc.stdout
    assert "checked: drafter B=16: sglang parse_dflash_draft_config ok" in proc.stdout
    assert "checked: 5 command lines parse and resolve with the patched sglang" in proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ddtree-")]
    assert len(rows) == 4 and all(ln.endswith("| PASS |") for ln in rows), rows
    assert "| batch | budget | D |" in proc.stdout  # the tree build + mask timing ran (on CPU here)
    argvs = json.loads((out / "command_lines.json").read_text())
    sync = argvs["ddtree-b16-bs16-sync"]
    for flag, value in [("--speculative-algorithm", "DDTREE"), ("--speculative-ddtree-budget", "16"),
                        ("--speculative-dflash-block-size", "16"), ("--max-running-requests", "8"),
                        ("--attention-backend", "triton"), ("--dtype", "float32")]:  # fmt: skip
        assert sync[sync.index(flag) + 1] == value, flag
    assert "--disable-overlap-schedule" in sync and "--enable-deterministic-inference" in sync
    assert "--disable-overlap-schedule" not in argvs["ddtree-b16-bs16-overlap"]
    assert "--speculative-algorithm" not in argvs["baseline"]
    assert sync[sync.index("--speculative-draft-model-path") + 1].endswith("drafter-b16")
    results = json.loads((out / "results.json").read_text())
    assert results["passed"] is True and len(results["rows"]) == 5
    assert all(r["prompts"] == 16 and r["identical"] == 16 for r in results["rows"])


@pytest.mark.sglang_cpu
def test_dry_run_catches_a_concurrency_only_corruption(cpu_python, tmp_path):
    proc = _run(cpu_python, tmp_path / "proof", "--blocks", "8", "--budgets", "16", "--skip-bench",
                "--dry-run-fault", "concurrent-corruption")  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-5000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ddtree-")]
    assert len(rows) == 2 and all(ln.endswith("| FAIL |") and "token 3" in ln for ln in rows), rows
    assert "| baseline |" in proc.stdout and "FAIL: 0/2 DDTree configurations" in proc.stdout


def test_usage_errors_exit_2(tmp_path):
    for bad in (["--budgets", "4,x"], ["--prompts", "50"], ["--dry-run-fault", "concurrent-corruption"]):
        proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *bad], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 2, (bad, proc.stderr)
