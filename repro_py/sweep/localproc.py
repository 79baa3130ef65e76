"""A reconfigurer that runs the simulated engine as a local subprocess.

For tests and the sweep-overhead benchmark: no systemd, no Ansible. It keeps
the restart chain's order (stop the old process and wait until it is gone
and the port is closed, start the new one, wait until this very process
answers) with the same readiness steps as the role's ``sglang_wait_ready``
module, in Python: a readiness probe (``/ready``, cheap; ``/health`` when
``/ready`` is absent), a one-token ``/generate``, and ``/server_info`` whose
``sim.pid`` must be the new process. The process exiting is noticed on the
next poll (``poll_s``), so a failed start is reported within a poll
interval of the exit, with the log tail as the journal.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from repro_py import spec_config
from repro_py.endpoint import Endpoint
from repro_py.results.failures import FAILED_TO_START
from repro_py.simengine.process import free_port, port_open, start_engine, terminate
from repro_py.sweep import extravars
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target
from repro_py.sweep.reconfigure import ReconfigureOutcome

_LOG_NAME = "engine.log"
#: echoed besides the speculative settings: what the new process runs (deterministic inference included)
_ECHO_EXTRA = frozenset({"version", "simulated", "enable_deterministic_inference"})


class _NotYet(Exception):
    pass


def _http(method: str, url: str, body: object | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status: int = resp.status
            return status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        raise _NotYet(f"{method} {url}: {exc}") from exc


def tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


class LocalProcessReconfigurer:
    """Start ``python -m repro_py.simengine`` per config on ``127.0.0.1:port``."""

    def __init__(
        self,
        port: int,
        *,
        host: str = "127.0.0.1",
        load_s: float = 0.5,
        warmup_s: float = 0.2,
        speed: float = 1.0,
        extra_args: Sequence[str] = (),
        poll_s: float = 0.1,
        ready_timeout_s: float = 60.0,
        stop_timeout_s: float = 15.0,
        inventory_deterministic: bool = False,
    ) -> None:
        self.port = port
        self.host = host
        self.load_s = load_s
        self.warmup_s = warmup_s
        self.speed = speed
        self.extra_args = list(extra_args)
        self.poll_s = poll_s
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        #: the inventory's sglang_service_deterministic_inference: what a production restart and the restore run
        self.inventory_deterministic = inventory_deterministic
        self.proc: subprocess.Popen[bytes] | None = None
        self.model_root: Path | None = None
        self._log_path: Path | None = None
        self.calls: list[str] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def engine_args(self, cfg: PlannedConfig) -> list[str]:
        """The engine's arguments (model paths and host/port are added by ``start_engine``)."""
        args = [
            "--served-model-name",
            "default",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--enable-metrics",
            "--reasoning-parser",
            "kimi_k2",
            "--sim-load-seconds",
            str(self.load_s),
            "--sim-warmup-seconds",
            str(self.warmup_s),
            "--sim-speed",
            str(self.speed),
            *spec_config.to_engine_flags(cfg.spec, drafter_path=None),
            *self.extra_args,
        ]
        if cfg.sim_fault:
            args += ["--sim-fault", cfg.sim_fault]
        return args

    # ------------------------------------------------------------ stop

    def stop(self) -> None:
        """Stop the engine and wait until the process is gone and the port is closed."""
        proc, self.proc = self.proc, None
        if proc is not None:
            terminate(proc, self.stop_timeout_s)
        deadline = time.monotonic() + self.stop_timeout_s
        while port_open(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.02)

    def close(self) -> None:
        self.stop()
        if self.model_root is not None:
            shutil.rmtree(self.model_root, ignore_errors=True)
            self.model_root = None

    # ------------------------------------------------------------ start + wait

    def _probe(self, proc: subprocess.Popen[bytes], phase: str) -> tuple[str, dict[str, Any] | None]:
        base = self.base_url
        if phase == "ready":
            status, _ = _http("GET", base + "/ready", timeout=2.0)
            if status == 404:
                status, _ = _http("GET", base + "/health", timeout=5.0)
            if status != 200:
                raise _NotYet(f"readiness probe returned {status}")
            phase = "generate"
        if phase == "generate":
            body = {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
            status, raw = _http("POST", base + "/generate", body, timeout=30.0)
            if status != 200:
                raise _NotYet(f"/generate returned {status}: {raw[:200]!r}")
            phase = "echo"
        status, raw = _http("GET", base + "/server_info", timeout=10.0)
        if status != 200:
            raise _NotYet(f"/server_info returned {status}")
        info = json.loads(raw or b"{}")
        sim = info.get("sim") if isinstance(info, dict) else None
        pid = sim.get("pid") if isinstance(sim, dict) else None
        if pid is not None and pid != proc.pid:
            raise _NotYet(f"server pid {pid} is not the new process {proc.pid}")
        return "done", info if isinstance(info, dict) else {}

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:
        with self.lock:
            return self._reconfigure(cfg, private_dir, cancel, restore=restore, deterministic=deterministic)

    def _reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool, deterministic: bool
    ) -> ReconfigureOutcome:
        self.calls.append(cfg.label)
        t0 = time.monotonic()
        private_dir.mkdir(parents=True, exist_ok=True)
        self.stop()
        # as the Ansible reconfigurer: the flag when asked for (never for the restore), else the inventory's value
        on = (deterministic and not restore) or self.inventory_deterministic
        args = self.engine_args(cfg) + (["--enable-deterministic-inference"] if on else [])
        unit = " ".join(args).encode()
        (private_dir / "engine-args.json").write_text(json.dumps(args, indent=1) + "\n", encoding="utf-8")
        if self.model_root is None:
            self.model_root = Path(tempfile.mkdtemp(prefix="sweep-sim-models-"))
        started = time.monotonic()
        engine = start_engine(args, model_root=self.model_root, port=self.port, log_dir=private_dir)
        proc = engine.proc
        self.proc = proc
        self._log_path = engine.log_path
        common: dict[str, Any] = {
            "invocation_id": f"local-{proc.pid}",
            "main_pid": proc.pid,
            "changed": True,
            "unit_sha256": hashlib.sha256(unit).hexdigest(),
        }
        phase = "ready"
        last = ""
        deadline = started + self.ready_timeout_s
        while True:
            if cancel.is_set():
                self.stop()
                return ReconfigureOutcome(
                    ok=False, status="canceled", wall_s=time.monotonic() - t0, reason="interrupted", **common
                )
            code = proc.poll()
            if code is not None:
                detected = time.monotonic()
                return ReconfigureOutcome(
                    ok=False,
                    status="failed",
                    wall_s=detected - t0,
                    failure_class=FAILED_TO_START,
                    reason=f"the engine exited during startup (exit code {code}, phase {phase}; "
                    f"noticed {detected - started:.1f} s after the start)",
                    journal=tail(self._log_path, 40),
                    **common,
                )
            try:
                phase, info = self._probe(proc, phase)
            except _NotYet as exc:
                last = str(exc)
                info = None
            if phase == "done" and info is not None:
                ready = time.monotonic()
                echo = {k: v for k, v in info.items() if k.startswith("speculative_") or k in _ECHO_EXTRA}
                return ReconfigureOutcome(
                    ok=True,
                    status="ready",
                    wall_s=ready - t0,
                    time_to_ready_s=round(ready - started, 3),
                    server_info_echo=echo,
                    **common,
                )
            if time.monotonic() > deadline:
                journal = tail(self._log_path, 40)
                self.stop()
                return ReconfigureOutcome(
                    ok=False,
                    status="failed",
                    wall_s=time.monotonic() - t0,
                    failure_class=FAILED_TO_START,
                    reason=f"not ready after {self.ready_timeout_s:.0f} s (phase {phase}; last: {last or 'n/a'})",
                    journal=journal,
                    **common,
                )
            time.sleep(self.poll_s)

    def journal(
        self, private_dir: Path, lines: int = 40, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        # one local process per reconfigure: its log holds only its own invocation
        if grep is not None:
            pattern = re.compile(grep)
            return [ln for ln in tail(self._log_path, 1 << 30) if pattern.search(ln)][-lines:] if self._log_path else []
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            return [*(tail(self._log_path, lines - 1) if self._log_path else []), f"(engine exited with code {code})"]
        return tail(self._log_path, lines) if self._log_path else []


def local_reconfigurer(target: Target) -> tuple[Target, LocalProcessReconfigurer]:
    """``--reconfigurer local``: the simulated engine as a local process on a free loopback port, with the
    inventory's simulated load/warmup/speed; the target then points at that port."""
    port = free_port()
    ep = Endpoint(
        f"http://127.0.0.1:{port}", api_key=target.endpoint.api_key, model="default",
        admin_api_key=target.endpoint.admin_api_key,
    )  # fmt: skip
    local = Target(
        inventory=target.inventory, host=target.host, hostvars=target.hostvars, endpoint=ep, engine_kind="simulated"
    )
    tv = target.var
    reconfigurer = LocalProcessReconfigurer(
        port,
        load_s=float(tv("sglang_service_sim_load_seconds", 0.5)),
        warmup_s=float(tv("sglang_service_sim_warmup_seconds", 0.2)),
        speed=float(tv("sglang_service_sim_speed", 1.0)),
        inventory_deterministic=tv(extravars.DETERMINISTIC_VAR) is True,
    )
    return local, reconfigurer
