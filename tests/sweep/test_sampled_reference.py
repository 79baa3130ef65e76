"""The sampled gate's reference in a run: the baseline's samples are written once (atomically) to the run
directory, never kept in a config's result, handed to every later config's gates, and read back by a resumed
run; a speculative config never makes one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from repro_py import gates as gates_mod
from repro_py.endpoint import Endpoint
from repro_py.gates import sampled
from repro_py.sweep.grid import validate_config
from repro_py.sweep.measure import BundleMeasure
from repro_py.sweep.state import RunDir

BASELINE = validate_config({"algorithm": "none"}, simulated=True)
DDTREE = validate_config({"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
                         simulated=True)  # fmt: skip
SETTING = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 6, "ignore_eos": True}


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[Mapping[str, Any] | None]:
    """Stand-in gates: record the sampled reference each call gets; the baseline returns samples."""
    calls: list[Mapping[str, Any] | None] = []

    async def fake(endpoint: Endpoint, expected: Any, reference: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs.get("sampled_reference"))
        verdict = "reference" if expected.algorithm == "none" and kwargs["sampled_reference"] is None else (
            "same_distribution")  # fmt: skip
        result: dict[str, Any] = {"passed": True, "verdict": verdict, "setting": SETTING}
        if verdict == "reference":
            result["samples"] = {"capital": [[1, 2, 3, 4, 5, 6]] * 3}
        return {"sampled": result, "lossless": {"verdict": "x"}, "passed": True}

    monkeypatch.setattr(gates_mod, "run_gates", fake)
    return calls


async def test_the_baselines_samples_become_the_runs_reference_and_a_resume_reads_them(
    tmp_path: Path, seen: list[Mapping[str, Any] | None]
) -> None:
    run_dir = RunDir(tmp_path / "r1")
    run_dir.path.mkdir()
    measure = BundleMeasure(sampled_reference=run_dir.sampled_reference)
    endpoint = Endpoint("http://127.0.0.1:1")
    spec_first = await measure.gates(endpoint, DDTREE, None)  # a speculative config never makes one
    assert not run_dir.sampled_reference.exists() and seen[-1] is None
    first = await measure.gates(endpoint, BASELINE, None)
    assert "samples" not in first["sampled"] and spec_first["sampled"]["verdict"] == "same_distribution"
    doc = json.loads(run_dir.sampled_reference.read_text())
    assert doc["label"] == "baseline" and doc["config"]["algorithm"] == "none"
    assert doc["reference"]["samples"] == {"capital": [[1, 2, 3, 4, 5, 6]] * 3}
    assert sampled.reference_problem(doc["reference"], SETTING) is None
    await measure.gates(endpoint, DDTREE, None)
    assert seen[-1] == doc["reference"]
    # a resumed run (a new process) reads the file; a baseline run again is judged against it, not rewritten
    resumed = BundleMeasure(sampled_reference=run_dir.sampled_reference)
    before = run_dir.sampled_reference.stat().st_mtime_ns
    await resumed.gates(endpoint, BASELINE, None)
    assert seen[-1] == doc["reference"] and run_dir.sampled_reference.stat().st_mtime_ns == before
    await resumed.gates(endpoint, DDTREE, None)
    assert seen[-1] == doc["reference"]
