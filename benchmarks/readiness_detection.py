"""Readiness detection: how soon a restart's outcome is noticed.

Against the simulated engine as a local process, measures

* ready detection: time from the engine becoming ready (an independent
  observer polls ``/health`` every 10 ms) to the readiness check returning;
* failed-start detection: time from the engine process exiting
  (``--sim-fault crash-on-load``; the exit time comes from ``waitpid`` in a
  thread) to the readiness check reporting the failure.

Two readiness checks are measured:

1. the role's own module ``plugins/modules/sglang_wait_ready.py``,
   loaded and run in this process (``main()`` with its real polling loop,
   /health, one-token /generate and /server_info probes, default
   ``poll_interval`` 0.5 s). Only its two systemd calls are replaced:
   ``systemctl show`` by the local process's state (active while it runs,
   failed once it exited; ``MainPID`` its pid) and ``journalctl`` by the
   engine log. The failed start is timed to the module's own ``detection_s``
   (the journal collection after it, which waits for journald to settle, is
   reported separately). Run twice: with the simulated ``/health`` as is
   (instant), and with 1.0 s added to every ``/health`` call, as sglang's own
   ``/health`` runs a generation and takes >= 1 s;
2. the sweep's local readiness probe (``LocalProcessReconfigurer``: ``/ready``,
   one-token ``/generate``, ``/server_info``; polls every 0.1 s).

Targets: ready noticed <= 2 s after the engine is ready; failed start
noticed <= 5 s after the exit. Usage::

    python benchmarks/readiness_detection.py [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / ".collections")]  # the collection's module imports its module_utils by name

from repro_py.simengine.process import Engine, free_port, start_engine  # noqa: E402
from repro_py.sweep.grid import validate_config  # noqa: E402
from repro_py.sweep.localproc import LocalProcessReconfigurer  # noqa: E402

MODULE_PATH = ROOT / "plugins" / "modules" / "sglang_wait_ready.py"
SPEC_ARGS = ["--speculative-algorithm", "DDTREE", "--speculative-dflash-block-size", "8",
             "--speculative-ddtree-budget", "8", "--speculative-ddtree-topk-cap", "4"]  # fmt: skip


def load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_wait_ready_bench", MODULE_PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Observer:
    """Independent timestamps: first /health 200 (10 ms polls) and the process exit (waitpid)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.ready_at: float | None = None
        self.exit_at: float | None = None
        self.stop = threading.Event()
        threading.Thread(target=self._exit, daemon=True).start()
        threading.Thread(target=self._ready, daemon=True).start()

    def _exit(self) -> None:
        self.engine.proc.wait()
        self.exit_at = time.monotonic()

    def _ready(self) -> None:
        url = self.engine.url + "/health"
        while not self.stop.is_set() and self.engine.proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == 200:
                        self.ready_at = time.monotonic()
                        return
            except OSError:
                pass
            time.sleep(0.01)


def run_module(mod: ModuleType, engine: Engine, started: float, *, health_delay: float) -> tuple[float, dict[str, Any]]:
    """Run the module's main() against ``engine``; returns (monotonic when main() began, its JSON result)."""

    def unit_show(unit: str) -> dict[str, str]:
        code = engine.proc.poll()
        active, sub = ("active", "running") if code is None else ("failed", "failed")
        return {
            "ActiveState": active, "SubState": sub, "MainPID": str(engine.pid if code is None else 0),
            "InvocationID": "bench-invocation", "Result": "success" if code is None else "exit-code",
            "ExecMainStartTimestampMonotonic": str(int(started * 1e6)),
            "ExecMainStatus": str(code or 0), "ExecMainCode": "0" if code is None else "1", "NRestarts": "0",
        }  # fmt: skip

    def journal(unit: str, invocation_id: str, lines: int) -> list[str]:
        time.sleep(0.25)  # the module's own settle loop waits at least one round
        return engine.log().splitlines()[-lines:]

    real_http: Callable[..., Any] = mod.http

    def http(method: str, url: str, api_key: str, body: object = None, timeout: float = 30.0) -> Any:
        if health_delay and url.endswith("/health"):
            time.sleep(health_delay)
        return real_http(method, url, api_key, body=body, timeout=timeout)

    setattr(mod, "unit_show", unit_show)  # noqa: B010 (patching a module loaded from a file)
    setattr(mod, "journal", journal)  # noqa: B010
    setattr(mod, "http", http)  # noqa: B010
    from ansible.module_utils import basic  # noqa: PLC0415

    args = {"unit": "sglang-bench", "port": engine.port, "host": "127.0.0.1",
            "previous_invocation_id": "old-invocation", "timeout": 60, "poll_interval": 0.5}  # fmt: skip
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode()
    basic._ANSIBLE_PROFILE = "legacy"  # what ansible's module debugging uses
    out = io.StringIO()
    began = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        mod.main()
    return began, json.loads(out.getvalue().strip().splitlines()[-1])


def stats(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s, max {max(values):.3f} s (n={len(values)})"


def bench_module(runs: int, health_delay: float, models: Path) -> tuple[list[float], list[float], list[float]]:
    ready, failed, failed_total = [], [], []
    for _ in range(runs):
        mod = load_module()
        started = time.monotonic()
        with start_engine([*SPEC_ARGS, "--sim-load-seconds", "1.0", "--sim-warmup-seconds", "0.7"],
                          model_root=models) as engine:  # fmt: skip
            obs = Observer(engine)
            _, result = run_module(mod, engine, started, health_delay=health_delay)
            done = time.monotonic()
            assert result.get("ready") is True, result
            assert obs.ready_at is not None
            ready.append(done - obs.ready_at)
        mod = load_module()
        started = time.monotonic()
        with start_engine([*SPEC_ARGS, "--sim-load-seconds", "1.0", "--sim-fault", "crash-on-load"],
                          model_root=models) as engine:  # fmt: skip
            obs = Observer(engine)
            began, result = run_module(mod, engine, started, health_delay=health_delay)
            done = time.monotonic()
            assert result.get("failed") is True, result
            assert obs.exit_at is not None
            failed.append(began + float(result["detection_s"]) - obs.exit_at)
            failed_total.append(done - obs.exit_at)
    return ready, failed, failed_total


def bench_local_probe(runs: int) -> tuple[list[float], list[float]]:
    ready: list[float] = []
    failed: list[float] = []
    ok_cfg = validate_config({"budget": 8, "topk": 4}, simulated=True)
    bad_cfg = validate_config({"budget": 8, "topk": 4, "sim_fault": "crash-on-load"}, simulated=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            rec = LocalProcessReconfigurer(free_port(), load_s=1.0, warmup_s=0.7)
            holder: dict[str, Observer] = {}

            def watch(rec: LocalProcessReconfigurer = rec, holder: dict[str, Observer] = holder) -> None:
                while rec.proc is None:
                    time.sleep(0.001)
                proc = rec.proc
                engine = Engine(proc=proc, port=rec.port, log_path=Path(tmp) / "none.log")
                holder["obs"] = Observer(engine)

            try:
                for cfg, sink in ((ok_cfg, ready), (bad_cfg, failed)):
                    rec.proc = None
                    t = threading.Thread(target=watch)
                    t.start()
                    out = rec.reconfigure(cfg, Path(tmp) / f"{i}-{cfg.label}", threading.Event())
                    done = time.monotonic()
                    t.join()
                    obs = holder["obs"]
                    if cfg is ok_cfg:
                        assert out.ok and obs.ready_at is not None, out.reason
                        sink.append(done - obs.ready_at)
                    else:
                        assert not out.ok
                        for _ in range(100):
                            if obs.exit_at is not None:
                                break
                            time.sleep(0.01)
                        assert obs.exit_at is not None
                        sink.append(done - obs.exit_at)
                    rec.stop()
            finally:
                rec.close()
    return ready, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    worst_ready = 0.0
    worst_failed = 0.0
    with tempfile.TemporaryDirectory() as models:
        print("readiness detection against the simulated engine (local process); targets: ready <= 2 s, failed <= 5 s")
        for delay, what in ((0.0, "simulated /health (instant)"), (1.0, "/health + 1.0 s (as sglang's)")):
            ready, failed, failed_total = bench_module(args.runs, delay, Path(models))
            worst_ready = max(worst_ready, *ready)
            worst_failed = max(worst_failed, *failed)
            print(f"  role module sglang_wait_ready.py, poll 0.5 s, {what}:")
            print(f"    ready noticed after        {stats(ready)}")
            print(f"    failed start noticed after {stats(failed)}")
            print(f"    ... and reported, with the journal excerpt, after {stats(failed_total)}")
    ready, failed = bench_local_probe(args.runs)
    print("  sweep's local probe (LocalProcessReconfigurer: /ready, poll 0.1 s):")
    print(f"    ready noticed after        {stats(ready)}")
    print(f"    failed start noticed after {stats(failed)}")
    print("  (the field script polled every 15 s and waited up to 12.5 minutes)")
    ok = worst_ready <= 2.0 and worst_failed <= 5.0
    print(
        f"  role module worst case: ready {worst_ready:.3f} s, failed {worst_failed:.3f} s: {'OK' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
