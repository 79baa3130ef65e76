"""Every adversarial probe (``probes.py``) is held in every isolation mode that promises it.

A mode that does not work on this machine is skipped with the reason; in mode ``none`` the probes it
does not promise (reading the host's world-readable files, seeing its process list) are skipped with
the reason, which is why the gates refuse that mode unless ``--allow-unisolated`` is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_py.codeeval.sandbox import SandboxLimits, run_candidate
from tests.codeeval.probes import PROBES, Context, Probe, probe_context, promised

MODES = ("bwrap", "namespaces", "none")


@pytest.fixture(scope="module", params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    probe = run_candidate("def f():\n    return 1\n", "assert f() == 1\n", isolation=name,
                          limits=SandboxLimits(timeout_s=10.0))
    if probe.outcome != "passed":
        pytest.skip(f"isolation {name} does not work here: {probe.detail} {probe.stderr_tail[-300:]}")
    return name


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Context]:
    monkeypatch.setenv("REPRO_JUDGE_SECRET", "not for the candidate")
    with probe_context(tmp_path) as context:
        yield context


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe_is_held(probe: Probe, mode: str, ctx: Context) -> None:
    if not promised(probe, mode):
        pytest.skip(f"mode none does not promise {probe.id} ({probe.in_none}): {probe.what}")
    result = run_candidate(probe.code(ctx), probe.tests(ctx), isolation=mode,
                           limits=SandboxLimits(**probe.limits))  # type: ignore[arg-type]
    assert probe.held(result, ctx), (
        f"probe {probe.id} ({probe.what}) fooled the judge in mode {mode}: outcome={result.outcome} "
        f"detail={result.detail!r} stdout={result.stdout_tail[-300:]!r} stderr={result.stderr_tail[-300:]!r}"
    )


def test_the_table_has_the_findings() -> None:
    ids = {p.id for p in PROBES}
    assert len(PROBES) == len(ids) >= 32
    assert {"shadow_sorted", "shadow_abs", "shadow_len", "shadow_set"} == {p.id for p in PROBES if p.new}
    for finding in ("judge_memory", "read_project", "ptrace_judge", "signal_judge", "network", "host_writes",
                    "setsid_daemon", "fork_count", "memory_per_sandbox", "cpu_limit_name"):
        assert finding in ids
