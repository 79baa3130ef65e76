"""The sweep loop: per config reconfigure -> server info -> benchmark -> gates -> atomic write.

Every config ends in a result file (:mod:`repro_py.results.schema`) with
``status`` ``ok`` or ``failed``; a failure carries its class and reason
(:mod:`repro_py.results.failures`).

A :class:`Measure` may decline to gate a config (its gates result then says
``"skipped": true`` with a ``reason``, e.g. a tuner that stopped measuring a
config that is clearly behind): the result is ``ok`` with gates not run, so
it can never win (winners need every gate passed) and is not a failure.

One config is :mod:`repro_py.sweep.configrun`: its production restart (the
figures, the coding gate, the config echo) and, with ``--lossless-restart
separate``, the lossless gate's own restart with deterministic inference
(:mod:`repro_py.sweep.lossless_restart`). The lossless reference is the
baseline's outputs (the baseline runs first), stored in
``lossless-reference.json`` when its lossless gate made one (whatever its other
gates say) and reused by ``--resume``; without a baseline no speculative config
is judged lossless. The lossless verdict also rests on the server's log: the
journal of the invocation that served the gate is scanned for the KV-window
invariant and tracebacks (``gates.serverlog``).

SIGINT: the in-flight config is abandoned (no result file, so ``--resume``
reruns it, or only its second restart when its first stage is in
``partial/<label>.json``); a result write in progress always completes (writes are atomic
and run on the event loop, where the signal handler cannot cut them); the
run is marked ``interrupted`` and the caller exits 130.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from repro_py.atomicio import write_json_atomic
from repro_py.results.schema import ConfigResult
from repro_py.sweep import fingerprint, state
from repro_py.sweep.configrun import ConfigRun
from repro_py.sweep.errors import Interrupted
from repro_py.sweep.estimate import format_duration
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.measure import Measure
from repro_py.sweep.plan import Plan
from repro_py.sweep.reconfigure import ReconfigureOutcome, Reconfigurer
from repro_py.sweep.sigint import with_sigint

RESTORE_LABEL = "restore-default"
_T = TypeVar("_T")
__all__ = ["RESTORE_LABEL", "Interrupted", "SweepOptions", "SweepOutcome", "SweepRunner"]


@dataclasses.dataclass
class SweepOptions:
    restore: bool = True
    retry_failed: bool = False
    bench_timeout_s: float | None = None
    #: the host's hardware class (``key`` and what was read), written into every result
    host_class: Mapping[str, Any] | None = None


@dataclasses.dataclass
class SweepOutcome:
    interrupted: bool
    ran: list[str]
    skipped: list[str]
    failed: dict[str, str]
    restore: dict[str, Any] | None
    wall_s: float
    timings: dict[str, dict[str, float]]


class _EtaColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        eta = task.fields.get("eta_s")
        return Text("ETA " + (format_duration(float(eta)) if isinstance(eta, int | float) else "?"), style="cyan")


class SweepRunner:
    def __init__(
        self,
        plan: Plan,
        run_dir: state.RunDir,
        reconfigurer: Reconfigurer,
        measure: Measure,
        *,
        bundle: Path,
        options: SweepOptions | None = None,
        console: Console | None = None,
        on_config_done: Callable[[str, ConfigResult], None] | None = None,
    ) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.reconfigurer = reconfigurer
        self.measure = measure
        self.bundle = bundle
        self.options = options or SweepOptions()
        self.console = console or Console(stderr=True)
        self.on_config_done = on_config_done
        self.cancel = threading.Event()
        self._current: asyncio.Future[ConfigResult] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.timings: dict[str, dict[str, float]] = {}
        self.config_run = ConfigRun(plan, run_dir, reconfigurer, measure, self.cancel, self.console)

    # ------------------------------------------------------------ signals

    def _on_sigint(self) -> None:
        if self.cancel.is_set():
            return
        self.cancel.set()
        if self.loop is not None:  # a second Ctrl-C: Python's own KeyboardInterrupt (writes are atomic anyway)
            with contextlib.suppress(RuntimeError, ValueError):
                self.loop.remove_signal_handler(signal.SIGINT)
        self.console.print(
            "[yellow]Ctrl-C: stopping after the current write; the run stays resumable (Ctrl-C again stops at once)[/]"
        )
        if self._current is not None and not self._current.done():
            self._current.cancel()

    # ------------------------------------------------------------ one config

    async def _reconfigure(self, cfg: PlannedConfig, private_dir: Path, *, restore: bool = False) -> ReconfigureOutcome:
        return await asyncio.to_thread(
            functools.partial(self.reconfigurer.reconfigure, cfg, private_dir, self.cancel, restore=restore)
        )

    async def run_config(self, cfg: PlannedConfig, controller_fp: Mapping[str, str]) -> ConfigResult:
        """One config's stages (:mod:`repro_py.sweep.configrun`): its restarts, benchmark and gates."""
        return await self.config_run.run(cfg, controller_fp)

    @staticmethod
    def _finish(result: ConfigResult, t0: float) -> ConfigResult:
        """Stamp the end; ``wall_s`` adds this session's time to what an earlier session spent (a partial)."""
        result["finished_at"] = state.now_iso()
        result["wall_s"] = round(float(result["wall_s"]) + time.monotonic() - t0, 3)
        return result

    async def run_config_and_write(
        self, cfg: PlannedConfig, current: Mapping[str, str] | None = None
    ) -> ConfigResult:
        """Run one config (cancellable) and write its result (never cut: no await inside)."""
        if current is None:
            current = fingerprint.controller_fingerprint(self.bundle, self.plan.target, cfg)
        t0 = time.monotonic()
        self._current = asyncio.ensure_future(self.run_config(cfg, current))
        try:
            result = await self._current
        finally:
            self._current = None
        result = self._finish(result, t0)
        if self.options.host_class is not None:
            result["host_class"] = dict(self.options.host_class)
        write_json_atomic(self.run_dir.result(cfg.label), result)
        self.run_dir.partial(cfg.label).unlink(missing_ok=True)  # the result holds everything it held
        return result

    # ------------------------------------------------------------ the loop

    async def run(self) -> SweepOutcome:
        return await self.run_guarded(self._run)

    async def run_guarded(self, body: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``body`` with this runner's Ctrl-C handling (cancel the config in flight, keep writes whole).

        The sweep's own loop runs this way; another loop over :meth:`run_config_and_write` (a tuner) can too."""
        self.loop = asyncio.get_running_loop()
        return await with_sigint(self._on_sigint, body)

    def _eta(self, remaining: list[PlannedConfig], actual: float, estimated: float) -> float:
        per = float(self.plan.estimate.get("per_config_s", 0.0))
        scale = actual / estimated if estimated > 0 and actual > 0 else 1.0
        return per * len(remaining) * scale

    async def _run(self) -> SweepOutcome:
        t_start = time.monotonic()
        outcome = SweepOutcome(False, [], [], {}, None, 0.0, self.timings)
        self.run_dir.write_state(state.STATE_RUNNING, host=self.plan.target.host, simulated=self.plan.simulated)
        todo: list[tuple[PlannedConfig, dict[str, str]]] = []
        for cfg in self.plan.configs:
            current = fingerprint.controller_fingerprint(self.bundle, self.plan.target, cfg)
            decision = state.decide(self.run_dir, cfg.label, current, retry_failed=self.options.retry_failed)
            if decision.run:
                todo.append((cfg, current))
                if decision.reason != state.NO_RESULT:
                    self.console.print(f"[yellow]{cfg.label}: {escape(decision.reason)}; rerun[/]")
            else:
                outcome.skipped.append(cfg.label)
                self.run_dir.partial(cfg.label).unlink(missing_ok=True)  # left by a write cut between the two
                self.console.print(f"[dim]{cfg.label}: {escape(decision.reason)}; not rerun[/]")
        per = float(self.plan.estimate.get("per_config_s", 0.0))
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _EtaColumn(),
            console=self.console,
            transient=False,
        )
        actual = 0.0
        with progress:
            task = progress.add_task("sweep", total=len(todo), eta_s=per * len(todo))
            for index, (cfg, current) in enumerate(todo):
                if self.cancel.is_set():
                    break
                progress.update(task, description=f"{cfg.label} ({index + 1}/{len(todo)})")
                t_cfg = time.monotonic()
                try:
                    result = await self.run_config_and_write(cfg, current)
                except (asyncio.CancelledError, Interrupted):
                    self.cancel.set()
                    break
                actual += time.monotonic() - t_cfg
                self.timings[cfg.label] = dict(result.get("timing") or {})
                outcome.ran.append(cfg.label)
                status = "[green]ok[/]"
                failure = result["failure"]
                if failure is not None:
                    outcome.failed[cfg.label] = f"{failure['class']}: {failure['reason']}"
                    status = f"[red]{failure['class']}[/]: {escape(str(failure['reason']))}"
                progress.console.print(f"{cfg.label}: {status} ({result['wall_s']:.1f} s)")
                if self.on_config_done is not None:
                    self.on_config_done(cfg.label, result)
                remaining = [c for c, _ in todo[index + 1 :]]
                progress.update(task, advance=1, eta_s=self._eta(remaining, actual, per * (index + 1)))
        if self.cancel.is_set():
            outcome.interrupted = True
            self.run_dir.write_state(state.STATE_INTERRUPTED, reason="SIGINT")
            outcome.wall_s = time.monotonic() - t_start
            return outcome
        if self.options.restore and self.plan.default_config is not None:
            outcome.restore = await self.restore(self.plan.default_config)
            if self.cancel.is_set():  # Ctrl-C during the restore: --resume restores again
                outcome.interrupted = True
                self.run_dir.write_state(state.STATE_INTERRUPTED, reason="SIGINT during the restore")
                outcome.wall_s = time.monotonic() - t_start
                return outcome
        elif self.plan.default_config is None:
            outcome.restore = {"status": "not_configured", "reason": "the inventory has no sweep_default_config"}
        else:
            outcome.restore = {"status": "skipped", "reason": "--no-restore"}
        self.run_dir.write_state(state.STATE_COMPLETE, restore=outcome.restore)
        outcome.wall_s = time.monotonic() - t_start
        return outcome

    async def restore(self, cfg: PlannedConfig) -> dict[str, Any]:
        """Reconfigure the inventory's default config (``runner/restore-default/``); the outcome as a dict."""
        self.console.print(f"restoring the inventory default config {cfg.label}")
        self._current = None
        try:
            outcome = await self._reconfigure(cfg, self.run_dir.runner_dir(RESTORE_LABEL), restore=True)
        except Exception as exc:
            return {"status": "failed", "label": cfg.label, "reason": f"{type(exc).__name__}: {exc}"}
        doc: dict[str, Any] = outcome.as_result()
        doc.update({"status": "ok" if outcome.ok else "failed", "label": cfg.label})
        if not outcome.ok:
            doc["reason"] = outcome.reason
            doc["journal"] = outcome.journal
            self.console.print(f"[red]restore of {cfg.label} failed: {escape(str(outcome.reason))}[/]")
        return doc
