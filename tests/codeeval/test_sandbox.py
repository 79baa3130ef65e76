from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from repro_py.codeeval.sandbox import SandboxLimits, network_isolation, run_candidate

FAST = SandboxLimits(timeout_s=5.0, cpu_s=2, memory_mb=256)


def test_pass() -> None:
    res = run_candidate("def f(x):\n    return x + 1\n", "assert f(1) == 2\n", limits=FAST)
    assert res.outcome == "passed", res
    assert res.isolation


def test_wrong_answer_is_assertion() -> None:
    res = run_candidate("def f(x):\n    return x\n", "assert f(1) == 2, 'f(1)'\n", limits=FAST)
    assert res.outcome == "assertion_failed"
    assert "AssertionError" in res.detail


def test_exception() -> None:
    res = run_candidate("def f(x):\n    return {}[x]\n", "assert f(1) == 2\n", limits=FAST)
    assert res.outcome == "exception"
    assert "KeyError" in res.detail


def test_syntax_error_is_exception() -> None:
    res = run_candidate("def f(x) return x\n", "assert f(1) == 1\n", limits=FAST)
    assert res.outcome == "exception"
    assert "SyntaxError" in res.detail


def test_wall_timeout() -> None:
    res = run_candidate("import time\ntime.sleep(30)\n", "", limits=SandboxLimits(timeout_s=1.0, cpu_s=5))
    assert res.outcome == "timeout"
    assert res.duration_s < 5


def test_cpu_limit() -> None:
    res = run_candidate("while True:\n    pass\n", "", limits=SandboxLimits(timeout_s=10.0, cpu_s=1))
    assert res.outcome == "timeout"
    assert "CPU" in res.detail


def test_memory_limit() -> None:
    res = run_candidate("blob = bytearray(1024 * 1024 * 1024)\n", "", limits=FAST)
    assert res.outcome == "exception"
    assert "MemoryError" in res.detail


def test_early_exit_cannot_pass() -> None:
    res = run_candidate("import os\nos._exit(0)\n", "assert False\n", limits=FAST)
    assert res.outcome == "exception"
    assert "early exit" in res.detail


def test_empty_environment() -> None:
    # Python's own C-locale coercion (PEP 538) may set LC_CTYPE; nothing is inherited from the parent.
    code = "import os\nassert set(os.environ) <= {'LC_CTYPE'}, dict(os.environ)\n"
    res = run_candidate(code, "", limits=FAST)
    assert res.outcome == "passed", res.detail


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A loopback TCP listener in this (the parent's) network namespace; records accepted connections."""
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


CONNECT = (
    "import socket\n"
    "s = socket.socket()\n"
    "s.settimeout(2)\n"
    "s.connect(('127.0.0.1', {port}))\n"
)


def test_network_blocked_with_guard(listener: tuple[int, list[int]]) -> None:
    port, accepted = listener
    res = run_candidate(CONNECT.format(port=port), "", limits=FAST)
    assert res.outcome == "exception"
    assert accepted == []


def test_network_namespace_alone_blocks(listener: tuple[int, list[int]]) -> None:
    prefix, _ = network_isolation()
    if not prefix:
        pytest.skip("no network namespace available on this machine (socket guard only)")
    port, accepted = listener
    res = run_candidate(CONNECT.format(port=port), "", limits=FAST, socket_guard=False)
    assert res.outcome == "exception", res
    assert "OSError" in res.detail or "Error" in res.detail
    assert accepted == []
    assert "netns" in res.isolation and "guard" not in res.isolation
