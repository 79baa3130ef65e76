"""The gates against the simulated engine running as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp

from repro_py.codeeval.problems import load_problems
from repro_py.endpoint import Endpoint
from repro_py.gates import run_gates, sampled
from repro_py.gates.coding import run_coding
from repro_py.gates.lossless import make_reference, run_lossless
from repro_py.simengine.process import REPO_ROOT, Engine, start_engine
from repro_py.simengine.testing import ddtree_flags
from repro_py.spec_config import validate

Factory = Callable[[list[str]], Engine]
DDTREE_B8 = validate({"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8})
TOKENS = 64
DET = ["--enable-deterministic-inference"]  # as a sweep runs every config


async def test_baseline_reference_then_ddtree_passes_all_gates(engine_factory: Factory) -> None:
    base = engine_factory(DET)
    first = await run_gates(Endpoint(base.url), validate({"algorithm": "none"}), None, lossless_max_new_tokens=TOKENS)
    assert first["passed"], json.dumps({k: v.get("reason") for k, v in first.items() if isinstance(v, dict)})
    assert first["lossless"]["is_reference"] is True and first["lossless"]["verdict"] == "reference"
    assert first["lossless"]["deterministic"]["server"] is True  # read from the engine's /server_info
    reference = make_reference(first["lossless"]["output_ids"], max_new_tokens=TOKENS, source="baseline",
                               deterministic=True)
    assert first["sampled"]["verdict"] == "reference"
    samples = sampled.make_reference(first["sampled"], source="baseline")
    base.stop()

    tree = engine_factory([*ddtree_flags(), *DET])
    res = await run_gates(Endpoint(tree.url), DDTREE_B8, reference, sampled_reference=samples)
    assert res["config_echo"]["passed"], res["config_echo"]
    assert res["sampled"]["passed"] and res["sampled"]["verdict"] == "same_distribution", res["sampled"]["reason"]
    assert res["lossless"]["passed"] and res["lossless"]["verdict"] == "lossless", res["lossless"]["reason"]
    assert res["lossless"]["exact_match_rate"] == 1.0
    assert res["lossless"]["first_divergence"] is None
    coding = res["coding"]
    assert coding["total"] >= 10
    assert coding["counts"]["pass"] == coding["total"], coding["problems"]
    assert coding["max_tokens"] == 1024
    assert all(p["reasoning_blocks_ignored"] >= 1 for p in coding["problems"])  # the drafts were in the reasoning
    assert coding["isolation_mode"] in ("bwrap", "namespaces") and res["isolation"] == coding["isolation_mode"]
    assert "no network (new netns)" in coding["isolation"] and coding["unisolated_allowed"] is False
    assert res["passed"] is True


async def test_a_speculative_server_with_no_deterministic_inference_is_not_judged(engine_factory: Factory) -> None:
    base = engine_factory(DET)
    first = await run_gates(Endpoint(base.url), validate({"algorithm": "none"}), None, lossless_max_new_tokens=TOKENS,
                            problems=load_problems()[:1])
    reference = make_reference(first["lossless"]["output_ids"], max_new_tokens=TOKENS, source="baseline",
                               deterministic=True)
    base.stop()
    tree = engine_factory(ddtree_flags())  # as deployed: no --enable-deterministic-inference
    res = await run_gates(Endpoint(tree.url), DDTREE_B8, reference, problems=load_problems()[:1])
    assert res["lossless"]["verdict"] == "not_deterministic" and res["passed"] is False
    assert res["lossless"]["deterministic"] == {"server": False, "reference": True}


async def test_mask_offset_fault_fails_lossless_with_a_divergence_index(engine_factory: Factory) -> None:
    good = engine_factory(DET)
    async with aiohttp.ClientSession() as session:
        ref_run = await run_lossless(session, Endpoint(good.url), None, baseline=True, deterministic=True,
                                     max_new_tokens=TOKENS)
    reference = make_reference(ref_run["output_ids"], max_new_tokens=TOKENS, source="baseline", deterministic=True)
    good.stop()
    broken = engine_factory([*ddtree_flags(), *DET, "--sim-fault", "mask-offset"])
    async with aiohttp.ClientSession() as session:
        res = await run_lossless(session, Endpoint(broken.url), reference, baseline=False, deterministic=True)
    assert res["passed"] is False and res["verdict"] == "diverged"
    assert isinstance(res["first_divergence"], int)
    assert res["first_divergence"] < TOKENS
    assert res["exact_match_rate"] < 1.0
    assert "diverge" in res["reason"]
    bad_rows = [p for p in res["prompts"] if not p["exact"]]
    assert bad_rows and all(isinstance(p["first_divergence"], int) for p in bad_rows)


async def test_config_echo_mismatch_is_detected(engine_factory: Factory) -> None:
    eng = engine_factory(ddtree_flags(budget=8, topk=4))
    wanted = validate({"budget": 16, "topk": 4, "window": 2048})
    res = await run_gates(Endpoint(eng.url), wanted, None, lossless_max_new_tokens=8,
                          problems=load_problems()[:1])
    echo = res["config_echo"]
    assert echo["passed"] is False
    assert echo["mismatches"] == [{"field": "speculative_ddtree_budget", "expected": 16, "got": 8}]
    assert res["passed"] is False


async def test_small_max_tokens_is_classified_truncated(engine_factory: Factory) -> None:
    eng = engine_factory(ddtree_flags())
    problems = load_problems()[:4]
    async with aiohttp.ClientSession() as session:
        res = await run_coding(session, Endpoint(eng.url), problems, max_tokens=48)
    assert res["passed"] is False
    assert res["counts"]["truncated"] == len(problems), res["problems"]
    assert all(p["finish_reason"] == "length" for p in res["problems"])


async def test_coding_without_reasoning_parser_splits_on_think(engine_factory: Factory, tmp_path: Path) -> None:
    eng = start_engine([*ddtree_flags(), "--sim-load-seconds", "0", "--sim-warmup-seconds", "0", "--sim-speed", "200"],
                       model_root=tmp_path / "models")
    try:
        eng.wait_ready(timeout=60)
        async with aiohttp.ClientSession() as session:
            res = await run_coding(session, Endpoint(eng.url), load_problems()[:3])
    finally:
        eng.stop()
    assert res["counts"]["pass"] == 3, res["problems"]
    assert all(p["code_source"] == "content after </think>" for p in res["problems"])


def test_cli_reference_roundtrip(engine_factory: Factory, tmp_path: Path) -> None:
    base = engine_factory(DET)
    ref = tmp_path / "ref.json"
    drawn = tmp_path / "samples.json"
    out = tmp_path / "gates.json"
    common = [sys.executable, "-m", "repro_py.gates", "--lossless-tokens", "16"]
    first = subprocess.run([*common, "--url", base.url, "--expect", "algorithm=none", "--write-reference", str(ref),
                            "--write-sampled-reference", str(drawn)],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "sampled:     PASS reference" in first.stdout
    assert json.loads(drawn.read_text())["algorithm"] == "none"
    written = json.loads(ref.read_text())
    assert written["max_new_tokens"] == 16 and written["algorithm"] == "none" and written["deterministic"] is True
    assert "sandbox:     bwrap" in first.stdout or "sandbox:     namespaces" in first.stdout
    base.stop()
    tree = engine_factory([*ddtree_flags(), *DET])
    log = tmp_path / "server.log"
    log.write_text("[2026-05-09 10:00:00 TP0] Decode batch. #running-req: 16\n")
    second = subprocess.run([*common, "--url", tree.url, "--expect", "budget=16,topk=4,window=2048", "--reference",
                             str(ref), "--sampled-reference", str(drawn), "--server-log", str(log), "--out", str(out)],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)
    assert second.returncode == 1
    assert "speculative_ddtree_budget" in second.stdout and "server log: 1 lines scanned, clean" in second.stdout
    judged = json.loads(out.read_text()) if out.exists() else {}
    # the whole verdict (its reason, p-value, requests) when it fails: a line cut short says too little
    assert "sampled:     PASS same_distribution: p=" in second.stdout, (second.stdout, judged.get("sampled"))
    swept = tmp_path / "sampled-reference.json"  # as a sweep keeps it in its run directory
    swept.write_text(json.dumps({"label": "baseline", "config": {"algorithm": "none"},
                                 "reference": json.loads(drawn.read_text())}))  # fmt: skip
    from_sweep = subprocess.run([*common, "--url", tree.url, "--expect", "budget=8,topk=4,window=2048", "--gates",
                                 "sampled", "--sampled-reference", str(swept)],
                                capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)  # fmt: skip
    assert from_sweep.returncode == 0 and "sampled:     PASS same_distribution" in from_sweep.stdout, from_sweep.stdout
    data = json.loads(out.read_text())
    assert data["lossless"]["passed"] is True and data["config_echo"]["passed"] is False
    assert data["sampled"]["verdict"] == "same_distribution" and "samples" not in data["sampled"]
    log.write_text("[2026-05-09 10:00:01 TP0] RuntimeError: DDTree KV window overrun: batch row 0 would write ...\n")
    third = subprocess.run([*common, "--url", tree.url, "--expect", "budget=8,topk=4,window=2048", "--reference",
                            str(ref), "--server-log", str(log)],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)
    assert third.returncode == 1 and "lossless:    FAIL server_log" in third.stdout, third.stdout
    usage = subprocess.run([*common, "--url", tree.url, "--expect", "budget=0"], capture_output=True, text=True,
                           cwd=REPO_ROOT, timeout=60, check=False)
    assert usage.returncode == 2
    assert "budget" in usage.stderr


def test_cli_without_isolation_refuses_unless_allowed(engine_factory: Factory, tmp_path: Path) -> None:
    """bwrap and unshare really absent from PATH: refused (exit 4) before a request; with --allow-unisolated the
    candidates are judged in mode none and the result and the printed summary say so."""
    eng = engine_factory(DET)
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty), "PYTHONPATH": str(REPO_ROOT)}
    common = [sys.executable, "-m", "repro_py.gates", "--url", eng.url, "--expect", "algorithm=none",
              "--lossless-tokens", "8"]
    served = int(eng.get_json("/server_info")["sim"]["generation_requests"])
    refused = subprocess.run(common, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False, env=env)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "refusing to judge candidate code" in refused.stderr and "apt-get install bubblewrap" in refused.stderr
    assert int(eng.get_json("/server_info")["sim"]["generation_requests"]) == served  # not one request was sent
    out = tmp_path / "gates.json"
    allowed = subprocess.run([*common, "--allow-unisolated", "--out", str(out)], capture_output=True, text=True,
                             cwd=REPO_ROOT, timeout=300, check=False, env=env)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "sandbox:     none (UNISOLATED: allowed by --allow-unisolated)" in allowed.stdout
    data = json.loads(out.read_text())
    assert data["isolation"] == data["coding"]["isolation_mode"] == "none" and data["coding"]["unisolated_allowed"]
    assert all(p["sandbox"]["isolation"].startswith("none (UNISOLATED") for p in data["coding"]["problems"])


def test_cli_gates_runs_only_the_named_gates(engine_factory: Factory, tmp_path: Path) -> None:
    """A speculative server checked by hand without the baseline's references: the lossless parts cannot be judged
    (no_baseline fails the run), ``--gates config_echo,coding`` runs those two only and passes; a name that is not a
    gate is refused before a request, naming it and the gates there are."""
    tree = engine_factory(ddtree_flags())
    common = [sys.executable, "-m", "repro_py.gates", "--url", tree.url, "--expect", "budget=8,topk=4,window=2048",
              "--lossless-tokens", "8"]  # fmt: skip
    everything = subprocess.run(common, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300, check=False)
    assert everything.returncode == 1 and "lossless:    FAIL no_baseline" in everything.stdout, everything.stdout
    out = tmp_path / "gates.json"
    some = subprocess.run([*common, "--gates", "config_echo,coding", "--out", str(out)], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=300, check=False)  # fmt: skip
    assert some.returncode == 0, some.stdout + some.stderr
    assert "gates:       PASS (coding, config_echo)" in some.stdout and "lossless" not in some.stdout
    assert set(json.loads(out.read_text())) == {"coding", "config_echo", "isolation", "passed"}
    served = int(tree.get_json("/server_info")["sim"]["generation_requests"])
    bad = subprocess.run([*common, "--gates", "coding,speed"], capture_output=True, text=True, cwd=REPO_ROOT,
                         timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and "speed is not a gate; allowed: coding, config_echo, lossless, sampled" in bad.stderr
    assert int(tree.get_json("/server_info")["sim"]["generation_requests"]) == served
