"""The coding sandbox: ordinary outcomes, and attacks from inside that must never earn a pass.

Every test runs under each isolation that works on this machine (bubblewrap, the namespace
fallback); one that does not work here is skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_py.codeeval import isolation as iso
from repro_py.codeeval.sandbox import (
    SandboxLimits,
    SandboxResult,
    available_isolation,
    isolation_in_force,
    run_candidate,
)

REPO = Path(__file__).resolve().parents[2]
FAST = SandboxLimits(timeout_s=5.0, cpu_s=2, memory_mb=256)


@pytest.fixture(params=["bwrap", "namespaces"])
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
    assert kind in ok.isolation or "bubblewrap" in ok.isolation
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
    monkeypatch.setenv("REPRO_JUDGE_SECRET", "not for the candidate")
    code = "import os\ndef env():\n    return sorted(os.environ)\ndef sort_in_place(xs):\n    xs.sort()\n"
    # Python's C-locale coercion may set LC_CTYPE and bwrap --chdir sets PWD; nothing comes from the judge
    tests = "assert set(env()) <= {'LC_CTYPE', 'PWD'}, env()\n"
    tests += "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]\n"
    res = run_candidate(code, tests, limits=FAST, isolation=kind)
    assert res.outcome == "passed", res.detail


# ---------------------------------------------------------------- attacks from inside


def test_stolen_token_and_early_exit_cannot_pass() -> None:
    """The field's exploit: read the harness's one-time token from ``__main__``, print it, exit 0 --
    against tests that ``assert False``. It scored "passed"."""
    code = (
        "import __main__, os, sys\n"
        "print(getattr(__main__, 'token', ''))\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    res = run_candidate(code, "assert False\n", limits=FAST)
    assert res.outcome != "passed", res


@pytest.mark.parametrize("forged", [
    b'{"loaded": ["f"]}\n{"value": true, "args": []}\n{"value": true, "args": []}\n',
    b'{"passed": true}\n' * 3,
    b'all tests passed\n',
])
def test_forging_replies_on_the_verdict_channel_cannot_pass(kind: str, forged: bytes) -> None:
    """The candidate knows the reply pipe (it is in its own argv) and writes "answers" itself: without the
    hidden expected values a forged reply is just a wrong value, or out of protocol."""
    code = (
        "import json, os, sys\n"
        "cfg = json.loads(sys.argv[1])\n"
        f"os.write(cfg['resp_fd'], {forged!r})\n"
        "def f(x):\n    return 0\n"
    )
    res = run(code, "assert f(1) == 17\nassert f(2) == 29\n", kind)
    assert res.outcome in ("assertion_failed", "exception"), res


def test_the_sandbox_never_receives_an_expected_value(kind: str) -> None:
    """Everything the candidate can read of its requests goes to its stdout: the expected value is not in it."""
    code = (
        "import json, os, sys\n"
        "cfg = json.loads(sys.argv[1])\n"
        "def f(x):\n"
        "    print(sys.argv, flush=True)\n"
        "    return x\n"
    )
    res = run(code, "assert f(1) == 987654321\n", kind)
    assert res.outcome == "assertion_failed"
    assert "987654321" not in res.stdout_tail + res.stderr_tail


def test_monkeypatching_builtins_and_always_equal_objects_cannot_pass(kind: str) -> None:
    patched = (
        "import builtins\n"
        "builtins.AssertionError = type('Nope', (Exception,), {})\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.len = lambda *a: 3\n"
        "def f(x):\n    return [0]\n"
    )
    res = run(patched, "assert f(1) == [1, 2, 3]\nassert len(f(1)) == 3\n", kind)
    assert res.outcome in ("assertion_failed", "exception"), res  # its own process may break; never ours
    always_equal = "class Yes:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Yes()\n"
    res = run(always_equal, "assert f(1) == 2\n", kind)
    assert res.outcome == "exception" and "not plain data" in res.detail, res


def test_early_exit_during_a_test_cannot_pass(kind: str) -> None:
    res = run("import os\ndef f(x):\n    os._exit(0)\n", "assert f(1) == 2\n", kind)
    assert res.outcome == "exception" and "early exit" in res.detail


def test_writes_go_nowhere_but_its_own_directory(kind: str, tmp_path: Path) -> None:
    host_targets = [tmp_path / "pwned", Path("/usr/pwned-by-candidate"), Path("/tmp/pwned-by-candidate"),
                    REPO / "pwned-by-candidate"]
    code = (
        "import os\n"
        "def write(path):\n"
        "    try:\n"
        "        if os.path.dirname(path):\n"
        "            os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "        with open(path, 'w') as fh:\n"
        "            fh.write('x')\n"
        "        return 'written'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    tests = "assert write('own-file.txt') == 'written'\n" + "".join(
        f"write({str(p)!r})\n" for p in host_targets
    )
    res = run(code, tests, kind)
    assert res.outcome == "passed", res
    for path in host_targets:
        assert not path.exists(), f"the candidate wrote {path} on the host"


def test_the_project_and_host_files_are_out_of_sight(kind: str) -> None:
    code = (
        "def read(path):\n"
        "    try:\n"
        "        with open(path, 'rb') as fh:\n"
        "            fh.read(1)\n"
        "        return 'read'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    secrets = [REPO / "repro_py" / "codeeval" / "problems.yaml", REPO / "Makefile", Path("/etc/passwd"),
               Path("/root/.bashrc")]
    tests = "".join(f"assert read({str(p)!r}) != 'read', {str(p)!r}\n" for p in secrets if p.exists())
    tests += "assert read('/usr/bin/env') == 'read'\n"  # read-only system files are there
    res = run(code, tests, kind)
    assert res.outcome == "passed", res


def test_fork_bomb_is_contained(kind: str) -> None:
    res = run("import os\nwhile True:\n    os.fork()\n", "assert False\n", kind,
              limits=SandboxLimits(timeout_s=10.0, cpu_s=5, nproc=16))
    assert res.outcome != "passed" and res.duration_s < 15
    leftovers = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            uid = int(status.split("\nUid:")[1].split()[0])
            if uid >= iso.UID_BASE and "\nState:\tZ" not in status:  # a zombie is dead, waiting for init
                leftovers.append(f"{entry.name}: {status.splitlines()[:3]}")
    assert leftovers == []


def test_huge_output_is_cut_and_killed(kind: str) -> None:
    res = run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", "", kind,
              limits=SandboxLimits(timeout_s=10.0, output_kb=256))
    assert res.outcome == "output_limit"
    assert len(res.stdout_tail) <= 2003


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A loopback TCP listener in this (the judge's) network namespace; records accepted connections."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    accepted: list[int] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=2)
    srv.close()


def test_no_network(kind: str, listener: tuple[int, list[int]]) -> None:
    port, accepted = listener
    code = (
        "import socket\n"
        "def connect(port):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=2).close()\n"
        "        return 'connected'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
    )
    res = run(code, f"assert connect({port}) != 'connected'\n", kind)
    assert res.outcome == "passed", res
    assert accepted == []


def test_the_isolation_in_force_is_recorded() -> None:
    kind = available_isolation()
    text = isolation_in_force()
    assert text.startswith("bubblewrap" if kind == "bwrap" else kind)
    if kind != "none":
        assert "no network" in text and "read-only" in text
    if os.geteuid() == 0 and kind != "none":
        assert "a fresh uid per run without capabilities" in text
