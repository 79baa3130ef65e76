"""The GPU losslessness proof script, run end to end in its CPU dry-run mode.

patches/tools/ddtree_gpu_lossless_proof.py --dry-run builds the tokenizer and
the built-weight target and drafters, validates them (transformers, sglang's
DFlash config parser, the drafter's first choices through a CPU draft
forward), prints the plan (expected accepts by depth, planned seconds per
configuration), builds every server command line and resolves it with the
patched sglang, then runs the client / comparison / table against CPU
stand-in servers; the sampled part (a softened target, sampled requests to a
baseline and a DDTree stand-in, chi-square tests against the exact
distribution) runs with few samples, and a stand-in that answers sampled
requests greedily must fail it. The environment builder (the deployment's lock and
wheelhouse, offline) is exercised on the test host's lock and the local
wheelhouse, whose sglang wheel is the cp312 one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import require

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "patches" / "tools" / "ddtree_gpu_lossless_proof.py"
WHEELHOUSE = REPO_ROOT / ".whl"
SGLANG_CP312 = WHEELHOUSE / "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"


def _run(cpu_python: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(cpu_python), str(SCRIPT), "--dry-run", "--out", str(out), "--prompts", "12", "--max-new-tokens", "12",
           "--parallel", "3", "--min-deep-accepts", "5", *extra]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)


@pytest.mark.sglang_cpu
def test_dry_run_end_to_end(cpu_python, tmp_path):
    out = tmp_path / "proof"
    proc = _run(cpu_python, out, "--shapes", "16:16", "--sampled-samples", "300")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert "DRY RUN (CPU stand-in servers, not sglang)" in proc.stdout
    assert "first choice = the target's chain at depths 1-4 for all 48 roots" in proc.stdout
    assert "checked: 5 command lines parse and resolve with the patched sglang" in proc.stdout
    assert "sampled target (LM head x 0.07): greedy choices unchanged" in proc.stdout
    plan = json.loads((out / "plan.json").read_text())
    assert [c["label"] for c in plan["configs"]] == ["baseline", "ddtree-b16-bs16-overlap", "ddtree-b16-bs16-sync",
                                                     "baseline-sampled", "ddtree-b16-bs8-sampled"]  # fmt: skip
    assert all(c["planned_s"] > 0 for c in plan["configs"]) and 0 < plan["planned_s"] <= 480
    assert all(c["expected_deep_accepts"] >= 5 for c in plan["configs"][1:3])
    assert "| config | prefill iterations | decode iterations | planned s |" in proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ddtree-") and ln.endswith("| PASS |")]
    assert len(rows) == 2, proc.stdout[-3000:]
    argvs = json.loads((out / "command_lines.json").read_text())
    sync = argvs["ddtree-b16-bs16-sync"]
    for flag, value in [("--speculative-algorithm", "DDTREE"), ("--speculative-ddtree-budget", "16"),
                        ("--speculative-dflash-block-size", "16"), ("--max-running-requests", "8"),
                        ("--attention-backend", "triton"), ("--dtype", "float32"), ("--chunked-prefill-size", "64"),
                        ("--max-total-tokens", "2048"), ("--context-length", "512")]:  # fmt: skip
        assert sync[sync.index(flag) + 1] == value, flag
    assert "--disable-overlap-schedule" in sync and "--enable-deterministic-inference" in sync
    assert "--disable-overlap-schedule" not in argvs["ddtree-b16-bs16-overlap"]
    assert "--speculative-algorithm" not in argvs["baseline"]
    sampled = argvs["ddtree-b16-bs8-sampled"]
    assert sampled[sampled.index("--model-path") + 1].endswith("target-sampled")
    assert "--enable-deterministic-inference" not in sampled and "--disable-overlap-schedule" not in sampled
    assert sampled[sampled.index("--speculative-dflash-block-size") + 1] == "8"
    assert "--speculative-algorithm" not in argvs["baseline-sampled"]
    results = json.loads((out / "results.json").read_text())
    assert results["passed"] is True and len(results["rows"]) == 3
    checks = results["sampled"]["checks"]
    assert results["sampled"]["ok"] is True and len(checks) == 4
    assert all(c["ok"] and c["samples"] == 300 for c in checks)
    assert {(c["prompt"], c["temperature"]) for c in checks} == {(0, 0.6), (0, 1.0), (1, 0.6), (1, 1.0)}
    assert "sampled: 4/4 distribution checks pass" in proc.stdout
    assert all(r["prompts"] == 12 and r["identical"] == 12 for r in results["rows"])
    deep = [r for r in results["rows"] if r["block"] is not None]
    assert all(r["deep_accepts"] == e["expected_deep_accepts"] for r, e in zip(deep, plan["configs"][1:3], strict=True))
    assert "| batch | budget | D |" in proc.stdout  # the tree build + mask timing ran (on CPU here)


@pytest.mark.sglang_cpu
def test_dry_run_catches_a_concurrency_only_corruption(cpu_python, tmp_path):
    proc = _run(cpu_python, tmp_path / "proof", "--shapes", "8:16", "--skip-bench", "--skip-sampled",
                "--dry-run-fault", "concurrent-corruption")  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-5000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| ddtree-")]
    fails = [ln for ln in rows if ln.endswith("| FAIL |") and "token 6" in ln]
    assert len(fails) == 2, rows
    assert "| baseline |" in proc.stdout and "FAIL: 0/2 DDTree configurations" in proc.stdout


@pytest.mark.sglang_cpu
def test_dry_run_catches_sampled_requests_decoded_greedily(cpu_python, tmp_path):
    """The DDTree stand-in answers sampled requests with the greedy continuation (what DDTree did
    before it sampled): the sampled part's chi-square tests must fail it, the greedy part pass."""
    proc = _run(cpu_python, tmp_path / "proof", "--shapes", "8:16", "--skip-bench", "--sampled-samples", "300",
                "--dry-run-fault", "sampled-greedy")  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-5000:]
    sampled_rows = [ln for ln in proc.stdout.splitlines() if ln.startswith(("| 0 |", "| 1 |"))]
    assert len(sampled_rows) == 4 and all(ln.endswith("| FAIL |") for ln in sampled_rows), sampled_rows
    assert "FAIL: 2/2 DDTree configurations identical" in proc.stdout
    assert "sampled: 0/4 distribution checks pass" in proc.stdout


@pytest.mark.sglang_cpu
def test_a_plan_that_cannot_prove_is_refused_before_any_server(cpu_python, tmp_path):
    proc = _run(cpu_python, tmp_path / "proof", "--shapes", "8:4", "--skip-bench", "--skip-sampled",
                "--min-deep-accepts", "100000")  # fmt: skip
    assert proc.returncode == 1, (proc.stdout + proc.stderr)[-3000:]
    assert "the plan cannot prove" in proc.stderr and "ddtree-b4-bs8-overlap" in proc.stderr
    assert "Planned duration of the servers" in proc.stdout  # the plan is printed ...
    assert "DDTree losslessness proof" not in proc.stdout  # ... and no server ran


def _python312() -> str | None:
    pyenv = sorted(str(p) for p in Path("~/.pyenv/versions").expanduser().glob("3.12*/bin/python3.12"))
    for cand in [shutil.which("python3.12"), *pyenv]:
        if cand and subprocess.run([cand, "--version"], capture_output=True, check=False).returncode == 0:
            return cand
    return None


def test_environment_is_built_offline_from_the_lock_and_wheelhouse(tmp_path):
    """The test host's shape of the deployment: its lock + the cp312 sglang wheel, offline."""
    py = _python312()
    require(py is not None and SGLANG_CP312.exists(), f"needs python3.12 and {SGLANG_CP312}")
    from ddtree_proof import venv as V  # noqa: PLC0415 -- patches/tools is put on sys.path by conftest

    lock = REPO_ROOT / "requirements" / "testhost.lock"
    python, fresh = V.build(py, tmp_path / "venv", lock, WHEELHOUSE, [SGLANG_CP312])
    assert fresh and python.exists()
    assert V.build(py, tmp_path / "venv", lock, WHEELHOUSE, [SGLANG_CP312]) == (python, False)  # reused
    tree, how = V.patched_tree(python, tmp_path / "tree")
    assert how == "applied" and (tree / "sglang" / "srt" / "speculative" / "ddtree_utils.py").exists()
    # a deployment venv the sglang_patches role already patched in place is used as it is
    site = V.site_packages(python)
    shutil.rmtree(site / "sglang")
    shutil.copytree(tree / "sglang", site / "sglang")
    _, how_again = V.patched_tree(python, tmp_path / "tree2")
    assert how_again == "already patched"
    with pytest.raises(V.EnvError, match=r"wheelhouse .* does not exist"):
        V.build(py, tmp_path / "venv2", lock, tmp_path / "missing", [])


def test_usage_errors_exit_2(tmp_path):
    for bad in (["--shapes", "8:x"], ["--prompts", "20", "--python", sys.executable], [],
                ["--dry-run-fault", "concurrent-corruption"], ["--python", sys.executable, "--skip-sampled"],
                ["--python", sys.executable, "--sampled-samples", "5000"],
                ["--dry-run", "--sampled-samples", "10"]):  # fmt: skip
        proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *bad], capture_output=True,
                              text=True, timeout=60, check=False)  # fmt: skip
        assert proc.returncode == 2, (bad, proc.stderr)
