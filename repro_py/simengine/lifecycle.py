"""Process lifecycle: load (nothing listens) -> listen + warmup (/health 503, /v1/models 200)
-> ready -> SIGTERM: drain (/health 503) -> optional linger (old process still answers
/v1/models) -> exit.

Like sglang, the main process has a child (the scheduler's stand-in) with no
SIGTERM handler: only the main process drains. A SIGTERM sent to the child
too (systemd's KillMode=control-group) kills it at once, and the requests in
flight fail; the main process stops the child itself after the drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time

from aiohttp import web

from repro_py.simengine.httputil import crash
from repro_py.simengine.server import build_app, run_warmup, wait_warmup
from repro_py.simengine.settings import SGLANG_VERSION, Settings
from repro_py.simengine.state import EngineState

log = logging.getLogger("repro_py.simengine")


class _Formatter(logging.Formatter):
    """sglang's ``[%Y-%m-%d %H:%M:%S{ TP0}] message`` format."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        rank = getattr(record, "rank", "")
        return f"[{stamp}{rank}] {record.getMessage()}"


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_Formatter())
    log.handlers[:] = [handler]
    log.setLevel(getattr(logging, level.upper(), logging.INFO))
    log.propagate = False
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def describe(settings: Settings) -> str:
    spec = settings.spec
    if spec.algorithm == "none":
        spec_text = "speculative=none (autoregressive)"
    else:
        spec_text = (
            f"speculative_algorithm=DFLASH ({'DDTree tree mode' if spec.algorithm == 'ddtree' else 'chain'}) "
            f"block_size={spec.block_size} budget={spec.budget} topk_cap={spec.topk} window={spec.window}"
        )
    faults = ",".join(settings.faults.specs) or "none"
    return (
        f"SIMULATED SGLang engine (repro_py.simengine) imitating sglang {SGLANG_VERSION}: "
        f"model={settings.served_model_name} {spec_text} sim_speed={settings.speed:g} "
        f"faults={faults} pid={os.getpid()} -- figures are a model of published numbers, not measurements"
    )


# The scheduler's stand-in: default SIGTERM disposition (it dies), exits when its parent is gone.
_CHILD_CODE = "import os, time\nparent = os.getppid()\nwhile os.getppid() == parent:\n    time.sleep(0.5)\n"


def run(settings: Settings) -> int:
    _setup_logging(settings.args.get("log_level", "info"))
    log.info(describe(settings))
    # sglang logs every resolved argument at startup (entrypoints/engine.py); with the series'
    # patch 0012 the API keys read "<redacted>" (settings.args carries them redacted).
    log.info(f"server_args={settings.args}")
    for warning in settings.warnings:
        log.warning(warning)
    child = subprocess.Popen([sys.executable, "-c", _CHILD_CODE], stdin=subprocess.DEVNULL)
    try:
        return asyncio.run(_main(settings, child))
    except KeyboardInterrupt:  # pragma: no cover - signals are handled in the loop
        return 130
    finally:
        child.terminate()  # sglang kills its process tree at the end (kill_process_tree)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


async def _sleep_or_stop(seconds: float, stop: asyncio.Event) -> bool:
    """Sleep; True if a stop was requested meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return stop.is_set()


async def _main(settings: Settings, child: subprocess.Popen[bytes]) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    force = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        if stop.is_set():
            force.set()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, int(sig))
    try:
        return await _serve(settings, stop, force, received, child)
    finally:
        child.terminate()  # before the loop closes: the watcher's thread waits on the child


async def _watch_child(child: subprocess.Popen[bytes], state: EngineState) -> None:
    """A dead scheduler fails the requests in flight (sglang cannot serve without it)."""
    await asyncio.to_thread(child.wait)
    if state.scheduler.active:
        crash(
            f"scheduler process {child.pid} exited with {child.returncode} while "
            f"{state.scheduler.active} request(s) were in flight"
        )
    log.info(f"Scheduler process {child.pid} exited with {child.returncode}. (SIMULATED)")


async def _serve(
    settings: Settings,
    stop: asyncio.Event,
    force: asyncio.Event,
    received: list[int],
    child: subprocess.Popen[bytes],
) -> int:

    # ---- load: nothing listens -------------------------------------------------------
    log.info(
        f"Load weight begin. (SIMULATED: {settings.load_seconds:g} s, nothing listens on the port)",
        extra={"rank": " TP0"},
    )
    faults = settings.faults
    if faults.crash_on_load:
        if await _sleep_or_stop(settings.load_seconds / 2, stop):
            return 0
        crash("crash-on-load: the model load failed (simulated loader exception)")
    if await _sleep_or_stop(settings.load_seconds, stop):
        log.info("Signal received during the model load; exiting without serving.")
        return 0
    if faults.oom_at_load(settings.spec.budget):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        sys.stderr.write(
            f"[{stamp} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "repro_py/simengine/lifecycle.py", line 1, in <simulated cuda graph capture>\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. (SIMULATED fault "
            f"oom-above-budget:{faults.oom_above_budget}: speculative_ddtree_budget={settings.spec.budget} > "
            f"{faults.oom_above_budget})\n"
        )
        sys.stderr.flush()
        return 1
    log.info(
        f"Load weight end. max_total_num_tokens={settings.kv_tokens}, chunked_prefill_size=8192, "
        f"max_running_requests={settings.max_running_requests}, context_len={settings.context_length} (SIMULATED)",
        extra={"rank": " TP0"},
    )

    # ---- listen + warmup -------------------------------------------------------------
    state = EngineState(settings)
    watcher = asyncio.get_running_loop().create_task(_watch_child(child, state))
    app = build_app(state)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port, reuse_address=True, backlog=1024)
    try:
        await site.start()
    except OSError as exc:
        log.error(
            f"ERROR: [Errno {exc.errno}] error while attempting to bind on address "
            f"({settings.host!r}, {settings.port}): {exc.strerror} (SIMULATED engine)"
        )
        await runner.cleanup()
        return 1
    state.scheduler.start()
    log.info(f"Uvicorn running on http://{settings.host}:{settings.port} (Press CTRL+C to quit) (SIMULATED)")
    try:
        if faults.never_ready:
            log.info("SIMULATED fault never-ready: warmup will never finish; /health stays 503")
            await stop.wait()
        elif not await _sleep_or_stop(settings.warmup_seconds, stop):
            if not settings.skip_warmup:
                await wait_warmup(run_warmup(app))
            if not stop.is_set():
                state.phase = "ready"
                state.ready_at = time.time()
                log.info("The server is fired up and ready to roll! (SIMULATED)")
        await stop.wait()

        # ---- drain -----------------------------------------------------------------
        signum = received[0] if received else signal.SIGTERM
        log.info(f"SIGTERM received. signum={signum} frame=None. Draining requests and shutting down... (SIMULATED)")
        state.phase = "draining"
        last_report = 0.0
        while state.scheduler.active and not force.is_set():
            if time.monotonic() - last_report >= 5.0:
                log.info(f"Gracefully exiting... Remaining number of requests {state.scheduler.active}.")
                last_report = time.monotonic()
            await _sleep_or_stop(0.05, force)
        # let finished requests' last bytes reach their clients (bounded)
        flush_deadline = time.monotonic() + 2.0
        while state.in_flight and not force.is_set() and time.monotonic() < flush_deadline:
            await _sleep_or_stop(0.02, force)
        # ---- linger: the old process still answers /v1/models ------------------------
        if settings.linger_seconds > 0 and not force.is_set():
            state.phase = "lingering"
            log.info(
                f"SIMULATED linger: still answering /v1/models for {settings.linger_seconds:g} s after the "
                "drain (/health 503), as the field's old process did"
            )
            await _sleep_or_stop(settings.linger_seconds, force)
    finally:
        watcher.cancel()
        await state.scheduler.stop()
        await runner.cleanup()
    log.info("Shutdown complete. (SIMULATED)")
    return 0
