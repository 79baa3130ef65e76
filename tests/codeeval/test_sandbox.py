"""The coding sandbox: ordinary outcomes under each isolation that works on this machine.

Every test runs under bubblewrap, the namespace fallback and mode none; one that does not
work here is skipped with the reason. The attacks from inside are the probes of
``probes.py`` (``test_probes.py``).
"""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from repro_py.codeeval import sandbox_session
from repro_py.codeeval.sandbox import (
    SandboxLimits,
    SandboxResult,
    _cpu_timeout,
    available_isolation,
    isolation_in_force,
    run_candidate,
)

REPO = Path(__file__).resolve().parents[2]
FAST = SandboxLimits(timeout_s=5.0, cpu_s=2, memory_mb=256)


@pytest.fixture(params=["bwrap", "namespaces", "none"])
def kind(request: pytest.FixtureRequest) -> str:
    name = str(request.param)
    probe = run_candidate("def f():\n    return 1\n", "assert f() == 1\n", isolation=name, limits=FAST)
    if probe.outcome != "passed":
        pytest.skip(f"isolation {name} does not work here: {probe.detail} {probe.stderr_tail[-300:]}")
    return name


def run(code: str, tests: str, kind: str, limits: SandboxLimits = FAST) -> SandboxResult:
    return run_candidate(code, tests, limits=limits, isolation=kind)


# ---------------------------------------------------------------- ordinary outcomes


def test_pass_wrong_exception_syntax(kind: str) -> None:
    ok = run_candidate("def f(x):\n    return x + 1\n", "assert f(1) == 2\n", limits=FAST, isolation=kind)
    assert ok.outcome == "passed", ok
    assert ok.isolation.startswith("bubblewrap" if kind == "bwrap" else kind), ok.isolation
    wrong = run_candidate("def f(x):\n    return x\n", "assert f(1) == 2, 'f(1)'\n", limits=FAST, isolation=kind)
    assert wrong.outcome == "assertion_failed" and "AssertionError: f(1)" in wrong.detail
    raised = run_candidate("def f(x):\n    return {}[x]\n", "assert f(1) == 2\n", limits=FAST, isolation=kind)
    assert raised.outcome == "exception" and "KeyError" in raised.detail
    syntax = run_candidate("def f(x) return x\n", "assert f(1) == 1\n", limits=FAST, isolation=kind)
    assert syntax.outcome == "exception" and "SyntaxError" in syntax.detail


def test_limits(kind: str) -> None:
    wall = run_candidate("import time\ntime.sleep(30)\n", "", limits=SandboxLimits(timeout_s=1.0, cpu_s=5),
                         isolation=kind)
    assert wall.outcome == "timeout" and wall.duration_s < 5
    cpu = run_candidate("while True:\n    pass\n", "", limits=SandboxLimits(timeout_s=15.0, cpu_s=1), isolation=kind)
    assert cpu.outcome == "timeout" and "CPU" in cpu.detail
    memory = run_candidate("blob = bytearray(1024 * 1024 * 1024)\n", "", limits=FAST, isolation=kind)
    assert memory.outcome == "exception" and "MemoryError" in memory.detail


def test_empty_environment_and_mutated_arguments(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the judge's environment; lists the candidate sorts in place come back sorted."""
    monkeypatch.setenv("REPRO_JUDGE_SECRET", "not for the candidate")
    code = "import os\ndef env():\n    return sorted(os.environ)\ndef sort_in_place(xs):\n    xs.sort()\n"
    # Python's C-locale coercion may set LC_CTYPE and bwrap --chdir sets PWD; nothing comes from the judge
    tests = "assert set(env()) <= {'LC_CTYPE', 'PWD'}, env()\n"
    tests += "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]\n"
    res = run_candidate(code, tests, limits=FAST, isolation=kind)
    assert res.outcome == "passed", res.detail


# ---------------------------------------------------------------- attacks: tests/codeeval/test_probes.py


def test_the_isolation_in_force_is_recorded() -> None:
    kind = available_isolation()
    text = isolation_in_force()
    assert text.startswith("bubblewrap" if kind == "bwrap" else kind)
    if kind != "none":
        assert "no network" in text and "read-only" in text
    if os.geteuid() == 0 and kind != "none":
        assert "a fresh uid per run without capabilities" in text


def test_the_sandbox_s_cpu_limit_is_believed_when_the_kernel_s_count_lags_behind() -> None:
    """On a loaded machine the kernel's count, read in clock ticks, trails the SIGXCPU the sandbox answered:
    0.82 s was read at a 1 s limit's signal (a flake that judged a timeout an exception)."""
    limits = SandboxLimits(cpu_s=1)
    assert _cpu_timeout(0.82, limits)
    assert not _cpu_timeout(0.1, limits)  # a candidate raising the sandbox's exception itself, early
    assert not _cpu_timeout(None, limits)


def test_the_cpu_limit_is_believed_from_the_count_the_kernel_checks_not_the_exact_one_that_trails_it(
    kind: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI run judged a CPU burn an exception: at the 1 s limit's SIGXCPU /proc read 0.80 s (the exact scheduler
    count, which trails the tick-charged count RLIMIT_CPU is checked against on a loaded machine). Here /proc is
    made to trail by that much on any machine; the verdict must not move."""
    exact = sandbox_session._cpu_of
    monkeypatch.setattr(sandbox_session, "_cpu_of", lambda pid: exact(pid) * 0.79)
    burn = run("def f(x):\n    while True:\n        pass\n", "assert f(1) == 1\n", kind,
               SandboxLimits(timeout_s=15.0, cpu_s=1, memory_mb=256))
    assert burn.outcome == "timeout", burn
    assert "CPU limit 1s exceeded" in burn.detail, burn.detail


def test_a_candidate_that_burns_most_of_the_limit_and_then_raises_the_sandbox_s_exception_is_not_believed(
    kind: str,
) -> None:
    """85% of a 1 s limit burned by the count the limit is checked against (the candidate's own CPUCLOCK_PROF
    clock, -8: MAKE_PROCESS_CPUCLOCK(0, CPUCLOCK_PROF)), then the sandbox's own CPULimitExceeded raised by the
    candidate: the kernel's count is below the limit, so this is the candidate's exception (a share of the
    limit believed it)."""
    code = ("import time\nimport sys\ndef f(x):\n    while time.clock_gettime(-8) < 0.85:\n        pass\n"
            "    raise sys.modules['__main__'].CPULimitExceeded('spoof')\n")
    spoof = run(code, "assert f(1) == 1\n", kind, SandboxLimits(timeout_s=15.0, cpu_s=1, memory_mb=256))
    assert spoof.outcome == "exception", spoof
    assert "CPULimitExceeded: spoof" in spoof.detail and "the candidate's own" in spoof.detail, spoof.detail


def test_charged_cpu_reads_the_count_that_sends_sigxcpu() -> None:
    """A child spins under RLIMIT_CPU = 1 s: when its SIGXCPU arrives, charged_cpu says at least 1 s."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: spin until the kernel's soft limit, say so, wait to be read
        os.close(read)

        def said(signum: int, frame: object) -> None:
            os.write(write, b"x")
            time.sleep(5)
            os._exit(0)

        signal.signal(signal.SIGXCPU, said)
        resource.setrlimit(resource.RLIMIT_CPU, (1, 3))
        while True:
            pass
    os.close(write)
    try:
        assert os.read(read, 1) == b"x"
        assert sandbox_session.charged_cpu(pid) >= 1.0
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
    assert sandbox_session.charged_cpu(pid) == 0.0  # gone
