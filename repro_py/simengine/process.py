"""The simulated engine as a local process on a loopback port: start it, wait for it, stop it.

    from repro_py.simengine.process import start_engine
    with start_engine(["--speculative-algorithm", "DDTREE", ...], model_root=tmp_path) as eng:
        eng.wait_ready()
        requests to eng.url ...

``model_root`` gets SIMULATED target/drafter directories (``fixtures``), and
``--model-path`` / ``--speculative-draft-model-path`` are added when absent
(the drafter path only when a speculative algorithm is given). The sweep's and
the tuner's ``--reconfigurer local`` run it so (``repro_py.sweep.localproc``);
the tests start it through here too (``repro_py.simengine.testing`` adds what only tests need).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from repro_py.simengine.fixtures import write_model_dirs

REPO_ROOT = Path(__file__).resolve().parents[2]


class EngineError(RuntimeError):
    """The engine process did not do what was waited for (exited, did not listen or become ready in time, or
    answered an error): the message names the wait or the request and carries the engine's log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def terminate(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM, wait up to ``timeout``; SIGKILL if it does not exit in time. Returns the exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return int(proc.returncode)


@dataclasses.dataclass
class Engine:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    api_key: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def listening(self) -> bool:
        return port_open("127.0.0.1", self.port)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes, dict[str, str]]:
        """GET without raising on HTTP errors: (status, body, headers)."""
        req = urllib.request.Request(self.url + path)
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as err:
            return err.code, err.read(), dict(err.headers)

    def get_json(self, path: str) -> Any:
        status, body, _ = self.get(path)
        if status != 200:
            raise EngineError(f"GET {path}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)

    def wait_listening(self, timeout: float = 30.0) -> None:
        self._wait(self.listening, timeout, "listen")

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            try:
                return self.listening() and self.get("/health", timeout=2.0)[0] == 200
            except OSError:
                return False

        self._wait(ready, timeout, "become ready")

    def _wait(self, cond: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return
            if self.proc.poll() is not None:
                raise EngineError(f"engine exited with {self.proc.returncode} before it could {what}:\n{self.log()}")
            time.sleep(0.05)
        raise EngineError(f"engine did not {what} within {timeout} s:\n{self.log()}")

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit in time. Returns the exit status."""
        return terminate(self.proc, timeout)

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def engine_command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "repro_py.simengine", *args]


def engine_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment with the repository on ``PYTHONPATH`` (and ``extra`` on top)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def start_engine(
    args: list[str],
    *,
    model_root: str | Path | None = None,
    port: int | None = None,
    drafter_block_size: int = 8,
    log_dir: str | Path | None = None,
    env: dict[str, str] | None = None,
) -> Engine:
    """Start ``python -m repro_py.simengine`` with ``args`` on 127.0.0.1 and return at once.

    Adds ``--host 127.0.0.1 --port P`` and model paths unless given. The
    caller waits (``wait_listening`` / ``wait_ready``) and stops it (``stop``
    or a ``with`` block).
    """
    args = list(args)
    root = Path(model_root) if model_root is not None else Path(tempfile.mkdtemp(prefix="simengine-models-"))
    paths = write_model_dirs(root, drafter_block_size=drafter_block_size)
    if "--model-path" not in args and "--model" not in args:
        args += ["--model-path", paths["model_path"]]
    if "--speculative-algorithm" in args and "--speculative-draft-model-path" not in args:
        args += ["--speculative-draft-model-path", paths["draft_model_path"]]
    if "--port" not in args:
        port = port or free_port()
        args += ["--port", str(port)]
    else:
        port = int(args[args.index("--port") + 1])
    if "--host" not in args:
        args += ["--host", "127.0.0.1"]
    api_key = args[args.index("--api-key") + 1] if "--api-key" in args else None
    log_dir = Path(log_dir) if log_dir is not None else root
    log_path = Path(tempfile.mkstemp(prefix="simengine-", suffix=".log", dir=log_dir)[1])
    proc_env = engine_env({"PYTHONUNBUFFERED": "1", **(env or {})})
    with log_path.open("wb") as fh:
        proc = subprocess.Popen(
            engine_command(args), stdout=fh, stderr=subprocess.STDOUT, env=proc_env, cwd=str(REPO_ROOT)
        )
    return Engine(proc=proc, port=port, log_path=log_path, api_key=api_key)
