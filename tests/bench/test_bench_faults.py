"""A failure is never a measurement: each fault of the simulated engine ends the cell as ``failed``
with its cause, failed repeats stay out of every figure, and a dead server stops the matrix and makes
``python -m repro_py.bench`` exit non-zero. Also: the engine's own clock checks the client's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.endpoint import Endpoint
from repro_py.exitcodes import ExitCode
from repro_py.simengine.process import REPO_ROOT, Engine
from repro_py.simengine.testing import ddtree_flags
from tests.bench.conftest import bench_and_kill

Factory = Callable[[list[str]], Engine]
FAST = ["--enable-metrics", "--sim-speed", "200"]


def _settings(**kw: object) -> BenchSettings:
    base: dict[str, object] = {"contexts": (60,), "concurrency": (4,), "repeats": 2, "max_tokens": 64, "warmup": 1}
    base.update(kw)
    return BenchSettings(**base)  # type: ignore[arg-type]


def _served(eng: Engine) -> int:
    return int(eng.get_json("/server_info")["sim"]["generation_requests"])


async def _prompt_requests(engine_factory: Factory) -> int:
    """Generation requests the prompt builder sends before a server's first cell (its chat probe)."""
    eng = engine_factory([*ddtree_flags(), *FAST])
    await run_matrix(Endpoint(eng.url), _settings(repeats=1, concurrency=(1,), warmup=0))
    return _served(eng) - 1  # less the one measured request


async def test_crash_mid_cell_fails_the_cell_and_stops_the_matrix(engine_factory: Factory) -> None:
    """The field's crash-after:20 cell was ``ok`` with 19/32 errors; now the cell fails and says why."""
    before_cell = await _prompt_requests(engine_factory)
    # warm-up (1) + repeat 0 (4 requests) succeed; the engine dies on the first request of repeat 1
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", f"crash-after:{before_cell + 1 + 4}"])
    result = await run_matrix(Endpoint(eng.url), _settings(contexts=(60, 1024)))
    first, second = result["cells"]
    assert first["status"] == "failed" and first["server_lost"] is True
    assert "the server stopped answering during repeat 1" in first["reason"]
    assert [r["status"] for r in first["repeats"]] == ["ok", "failed"]
    assert first["repeats"][1]["errors"] == 4
    # the dead repeat is reported and left out: the median is repeat 0's figure, not half of it
    assert first["median"]["output_tps"] == first["repeats"][0]["output_tps"] > 0
    assert first["median"]["repeats_used"] == 1
    assert second["status"] == "failed" and second["reason"].startswith("not run: the server stopped answering")
    assert result["status"] == "failed" and result["failed_cells"] == 2 and result["server_lost"]
    assert eng.wait_exit(5) == 1


async def test_aborted_generations_are_errors_and_their_tokens_count_nowhere(engine_factory: Factory) -> None:
    before_cell = await _prompt_requests(engine_factory)
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", f"abort-after:{before_cell}"])
    result = await run_matrix(Endpoint(eng.url), _settings(repeats=1, warmup=0))
    cell = result["cells"][0]
    rep = cell["repeats"][0]
    assert cell["status"] == "failed" and "server_lost" not in cell
    assert rep["status"] == "failed" and rep["errors"] == rep["requests"] == 4
    assert rep["finish_reasons"] == {"abort": 4}
    assert "finish_reason 'abort'" in rep["reason"]
    assert rep["output_tokens"] == 0 and rep["output_tps"] == 0.0
    assert cell["median"] is None
    assert rep["counters"]["aborted"] == 4  # the engine counted them too (sglang:num_aborted_requests_total)


async def test_mid_stream_error_fails_the_repeat(engine_factory: Factory) -> None:
    before_cell = await _prompt_requests(engine_factory)
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", f"stream-error-after:{before_cell}"])
    result = await run_matrix(Endpoint(eng.url), _settings(repeats=1, warmup=0))
    cell = result["cells"][0]
    assert cell["status"] == "failed"
    assert "stream error: SIMULATED fault" in cell["reason"]
    assert cell["repeats"][0]["errors"] == 4


async def test_stalled_requests_time_out_and_fail_the_cell(engine_factory: Factory) -> None:
    before_cell = await _prompt_requests(engine_factory)
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", f"stall-after:{before_cell}"])
    t0 = time.monotonic()
    result = await run_matrix(Endpoint(eng.url), _settings(repeats=1, warmup=0, request_timeout_s=1.5))
    assert time.monotonic() - t0 < 30
    cell = result["cells"][0]
    assert cell["status"] == "failed" and "timed out after 1.5s" in cell["reason"]
    assert "server_lost" not in cell  # it still answers; it just never finishes these


async def test_error_budget_lets_a_repeat_count_with_that_many_failures(engine_factory: Factory) -> None:
    before_cell = await _prompt_requests(engine_factory)
    # 4 requests per repeat through 1 worker: the 4th aborts
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", f"abort-after:{before_cell + 3}"])
    result = await run_matrix(
        Endpoint(eng.url), _settings(concurrency=(1,), requests_per_cell=4, repeats=1, warmup=0, error_budget=1)
    )
    cell = result["cells"][0]
    assert cell["status"] == "ok", cell["reason"]
    assert cell["errors"] == 1 and cell["repeats"][0]["ok"] == 3
    # the server answered after the failed request: it counts against the budget, and the result says so
    assert cell["budget_used"] == 1 and cell["repeats"][0]["budget_used"] == 1
    assert cell["repeats"][0]["error_budget"] == 1


def test_kill_9_mid_cell_exits_nonzero_with_the_reason(engine_factory: Factory, tmp_path: Path) -> None:
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", "2"])
    eng.wait_ready(30)
    out = tmp_path / "bench.json"
    bench = bench_and_kill(eng, ["--contexts", "60,1024", "--concurrency", "4", "--repeats", "2",
                                 "--requests-per-cell", "8", "--max-tokens", "256", "--ignore-eos", "--out", str(out),
                                 "--quiet"], served=5)  # the chat probe, warm-up and the first measured requests
    stderr = bench.stderr
    assert bench.returncode == ExitCode.FAILURE, stderr
    assert "the server stopped answering" in stderr
    data = json.loads(out.read_text())
    first, second = data["cells"]
    assert first["status"] == "failed" and first["server_lost"] is True
    assert all(r["status"] == "failed" for r in first["repeats"]) and first["median"] is None
    assert second["reason"].startswith("not run")


async def test_engine_clock_checks_the_client_clock(engine_factory: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's histograms time each repeat on their own; a client clock running 2x fast shows as a
    client/engine ratio of 2 (the old engine_output_tps divided by the client's span and always agreed)."""
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", "4"])
    settings = _settings(repeats=1, max_tokens=128, ignore_eos=True)
    honest = (await run_matrix(Endpoint(eng.url), settings))["cells"][0]
    ratio = honest["median"]["timing_ratio"]
    timing = honest["repeats"][0]["timing"]
    assert timing["engine"]["requests"] == 4 and timing["reason"] is None
    assert 0.9 < ratio["e2e_mean_ms"] < 1.3, timing
    assert 0.75 < ratio["output_tps_per_request"] < 1.1, timing
    assert 0.8 < ratio["itl_token_mean_ms"] < 1.25, timing

    real = time.perf_counter
    start = real()
    monkeypatch.setattr(time, "perf_counter", lambda: start + 2.0 * (real() - start))
    skewed = (await run_matrix(Endpoint(eng.url), settings))["cells"][0]
    monkeypatch.undo()
    assert skewed["median"]["timing_ratio"]["e2e_mean_ms"] == pytest.approx(2 * ratio["e2e_mean_ms"], rel=0.25)
    assert skewed["median"]["timing_ratio"]["output_tps_per_request"] == pytest.approx(
        ratio["output_tps_per_request"] / 2, rel=0.25
    )


async def test_per_token_and_per_chunk_itl_are_both_reported(engine_factory: Factory) -> None:
    """With speculative decoding a chunk carries ~accept-length tokens: the two ITLs differ by about that."""
    eng = engine_factory([*ddtree_flags(), "--enable-metrics", "--sim-speed", "4"])
    cell = (await run_matrix(Endpoint(eng.url), _settings(repeats=1, max_tokens=128, ignore_eos=True)))["cells"][0]
    med = cell["median"]
    per_chunk, per_token = med["itl_chunk_ms"]["p50"], med["itl_token_ms"]["p50"]
    assert per_chunk > 0 and per_token > 0
    assert per_chunk / per_token == pytest.approx(med["accept_length"], rel=0.35)
    engine_tpot = cell["repeats"][0]["timing"]["engine"]["itl_token_mean_ms"]
    assert per_token == pytest.approx(engine_tpot, rel=0.25)


def test_cli_crash_after_exits_failure(engine_factory: Factory, tmp_path: Path) -> None:
    eng = engine_factory([*ddtree_flags(), *FAST, "--sim-fault", "crash-after:3"])
    eng.wait_ready(30)
    proc = subprocess.run(
        [sys.executable, "-m", "repro_py.bench", "--url", eng.url, "--contexts", "60", "--concurrency", "4",
         "--repeats", "2", "--max-tokens", "32", "--out", str(tmp_path / "b.json")],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False,
    )
    assert proc.returncode == ExitCode.FAILURE, proc.stdout + proc.stderr
    assert "cells failed" in proc.stderr and "stopped answering" in proc.stderr
