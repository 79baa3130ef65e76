"""The benchmark against the simulated engine running as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.endpoint import Endpoint
from repro_py.simengine import perf_model
from repro_py.simengine.process import REPO_ROOT, Engine
from repro_py.simengine.testing import ddtree_flags

SPEED = "200"
Factory = Callable[[list[str]], Engine]


async def test_small_matrix_accept_length_from_counters(engine_factory: Factory) -> None:
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", SPEED])
    settings = BenchSettings(contexts=(60, 1024), concurrency=(1, 4), repeats=2, max_tokens=128, warmup=1)
    result = await run_matrix(Endpoint(eng.url), settings)
    assert result["engine"]["kind"] == "simulated"
    assert result["engine"]["sim_speed"] == float(SPEED)
    assert [(c["context"], c["concurrency"]) for c in result["cells"]] == [(60, 1), (60, 4), (1024, 1), (1024, 4)]
    cfg = perf_model.ModelConfig(mode="ddtree", block_size=8, budget=8, topk=4, window=2048)
    for cell in result["cells"]:
        assert cell["status"] == "ok", cell["reason"]
        med = cell["median"]
        assert cell["errors"] == 0 and cell["repeats_ok"] == 2 and cell["repeats_failed"] == []
        assert cell["requests"] == 2 * cell["concurrency"]
        assert med["output_tps"] > 0
        ttft, itl = med["ttft_ms"], med["itl_chunk_ms"]
        assert 0 < ttft["p50"] <= ttft["p90"] <= ttft["p99"], ttft
        assert 0 < itl["p50"] <= itl["p90"] <= itl["p99"], itl
        expected = perf_model.accept_length(cfg, cell["context"])
        assert med["accept_length"] == pytest.approx(expected, rel=0.10), (cell["context"], expected)
        assert med["verify_steps"] > 0
        # the server's own prompt count is what the prompt was built to
        for rep in cell["repeats"]:
            assert abs(rep["prompt_tokens"]["min"] - cell["context"]) <= cell["prompt"]["tolerance"]
            assert rep["counters"]["requests"] == cell["concurrency"]  # warm-up excluded
        cv = cell["cv"]["output_tps"]
        assert 0 <= cv < 1  # two repeats of the same cell: a spread, not a different result
        assert cell["noisy"] is (cv > settings.cv_threshold)


async def test_kv_capacity_skip_and_missing_metrics(engine_factory: Factory) -> None:
    eng = engine_factory([*ddtree_flags(), "--sim-speed", SPEED, "--sim-kv-tokens", "3000"])
    settings = BenchSettings(contexts=(60, 1024), concurrency=(1, 4), repeats=1, max_tokens=64, warmup=0)
    result = await run_matrix(Endpoint(eng.url), settings)
    by = {(c["context"], c["concurrency"]): c for c in result["cells"]}
    skipped = by[(1024, 4)]
    assert skipped["status"] == "skipped"
    assert "4352" in skipped["reason"] and "3000" in skipped["reason"]
    ok = by[(60, 1)]
    assert ok["status"] == "ok"
    assert result["engine"]["metrics"] is False
    assert ok["median"]["accept_length"] is None
    assert "--enable-metrics" in ok["median"]["accept_length_reason"]


async def test_baseline_has_no_accept_length(engine_factory: Factory) -> None:
    eng = engine_factory(["--enable-metrics", "--sim-speed", SPEED])
    settings = BenchSettings(contexts=(60,), concurrency=(2,), repeats=1, max_tokens=32, warmup=0)
    result = await run_matrix(Endpoint(eng.url), settings)
    cell = result["cells"][0]
    assert cell["status"] == "ok"
    assert cell["median"]["accept_length"] is None
    assert cell["median"]["accept_length_reason"]


async def test_context_too_short_for_the_instruction(engine_factory: Factory) -> None:
    eng = engine_factory(["--sim-speed", SPEED])
    result = await run_matrix(Endpoint(eng.url), BenchSettings(contexts=(5,), concurrency=(1,), repeats=1,
                                                               max_tokens=8, warmup=0))
    cell = result["cells"][0]
    assert cell["status"] == "failed"
    assert "shorter than the fixed instruction" in cell["reason"]


def test_cli_writes_json_and_prints_table(engine_factory: Factory, tmp_path: Path) -> None:
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", SPEED, "--api-key", "sekret"])
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "repro_py.bench", "--url", eng.url, "--api-key", "sekret", "--contexts", "60",
         "--concurrency", "2", "--repeats", "2", "--max-tokens", "32", "--ignore-eos", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "accept" in proc.stdout and "simulated" in proc.stdout
    assert f"SIMULATED, sim-speed x{float(SPEED):g}: figures are model outputs x{float(SPEED):g}" in proc.stdout
    data = json.loads(out.read_text())
    cell = data["cells"][0]
    assert cell["status"] == "ok"
    assert all(r["finish_reasons"] == {"length": 2} for r in cell["repeats"])
    assert data["settings"]["ignore_eos"] is True


def test_cli_unreachable_and_usage(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "repro_py.bench", "--url", "http://127.0.0.1:9", "--contexts", "60",
                          "--concurrency", "1", "--repeats", "1"],
                         capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False)
    assert bad.returncode == 1
    assert "unreachable" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "repro_py.bench", "--url", "http://x", "--contexts", "a,b"],
                           capture_output=True, text=True, cwd=REPO_ROOT, timeout=60, check=False)
    assert usage.returncode == 2
