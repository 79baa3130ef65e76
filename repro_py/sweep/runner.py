"""The sweep loop: per config reconfigure -> server info -> benchmark -> gates -> atomic write.

Every config ends in a result file (:mod:`repro_py.sweep.result_schema`) with
``status`` ``ok`` or ``failed``; a failure carries its class and reason
(:mod:`repro_py.sweep.failures`).

A :class:`Measure` may decline to gate a config (its gates result then says
``"skipped": true`` with a ``reason``, e.g. a tuner that stopped measuring a
config that is clearly behind): the result is ``ok`` with gates not run, so
it can never win (winners need every gate passed) and is not a failure.

The lossless reference is the baseline's outputs (the baseline runs first),
stored in ``lossless-reference.json`` when its lossless gate made one (whatever
its other gates say) and reused by ``--resume``; without a baseline no
speculative config is judged lossless. The lossless verdict also rests on the
server's log: the journal of the invocation that served the config is scanned
for the KV-window invariant and tracebacks (``gates.serverlog``).

SIGINT: the in-flight config is abandoned (no result file, so ``--resume``
reruns it); a result write in progress always completes (writes are atomic
and run on the event loop, where the signal handler cannot cut them); the
run is marked ``interrupted`` and the caller exits 130.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
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
from repro_py.gates import serverlog
from repro_py.gates.lossless import BASELINE
from repro_py.sweep import fingerprint, hostcode, state
from repro_py.sweep.estimate import format_duration
from repro_py.sweep.failures import CRASHED, FAILED_TO_START, GATE_FAILED, bench_error_summary, failed_gates
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.measure import Measure
from repro_py.sweep.plan import Plan
from repro_py.sweep.reconfigure import ReconfigureOutcome, Reconfigurer
from repro_py.sweep.result_schema import ConfigResult, mark_failed, new_result

RESTORE_LABEL = "restore-default"
_T = TypeVar("_T")


class Interrupted(Exception):
    """SIGINT arrived; the run is left resumable."""


@dataclasses.dataclass
class SweepOptions:
    restore: bool = True
    retry_failed: bool = False
    bench_timeout_s: float | None = None


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

    async def _journal(self, cfg: PlannedConfig, result: Mapping[str, Any]) -> list[str]:
        """The journal of the invocation that served this config (never an earlier run's lines)."""
        invocation = (result.get("reconfigure") or {}).get("invocation_id")
        private = self.run_dir.runner_dir(cfg.label) / "journal"
        try:
            return await asyncio.to_thread(
                functools.partial(self.reconfigurer.journal, private, invocation_id=invocation or None)
            )
        except Exception as exc:  # best effort
            return [f"(journal unavailable: {exc})"]

    async def _reconfigure(self, cfg: PlannedConfig, private_dir: Path, *, restore: bool = False) -> ReconfigureOutcome:
        return await asyncio.to_thread(
            functools.partial(self.reconfigurer.reconfigure, cfg, private_dir, self.cancel, restore=restore)
        )

    async def run_config(self, cfg: PlannedConfig, controller_fp: Mapping[str, str]) -> ConfigResult:
        result = new_result(
            run_id=self.run_dir.run_id, label=cfg.label, config=cfg.short(), extra_vars=cfg.extra_vars,
            engine_kind=self.plan.target.engine_kind,
            bench_settings={**self.plan.bench.as_dict(), **cfg.sampling.as_dict()},
            started_at=state.now_iso(), sampling=cfg.sampling.as_dict(),
        )  # fmt: skip
        timing: dict[str, float] = result.setdefault("timing", {})
        endpoint = self.plan.target.endpoint
        unit_sha: str | None = None
        version: str | None = None
        try:
            t = time.monotonic()
            outcome = await self._reconfigure(cfg, self.run_dir.runner_dir(cfg.label))
            timing["reconfigure_s"] = round(time.monotonic() - t, 3)
            if self.cancel.is_set() or outcome.status == "canceled":
                raise Interrupted
            result["reconfigure"] = outcome.as_result()
            unit_sha = outcome.unit_sha256
            if outcome.time_to_ready_s is not None:
                timing["load_s"] = float(outcome.time_to_ready_s)
            if not outcome.ok:
                return mark_failed(
                    result, outcome.failure_class or FAILED_TO_START, outcome.reason or "", outcome.journal
                )

            t = time.monotonic()
            try:
                engine = await self.measure.server_info(endpoint)
            except Exception as exc:
                return mark_failed(
                    result,
                    FAILED_TO_START,
                    f"reported ready, but /server_info failed: {type(exc).__name__}: {exc}",
                    await self._journal(cfg, result),
                )
            timing["server_info_s"] = round(time.monotonic() - t, 3)
            result["engine"] = engine
            version = engine.get("version")

            t = time.monotonic()
            bench: dict[str, Any] | None = None
            bench_error: str | None = None
            try:
                bench = await self.measure.bench(endpoint, cfg, self.plan.bench)
            except (asyncio.CancelledError, Interrupted):
                raise
            except Exception as exc:
                bench_error = f"{type(exc).__name__}: {exc}"
            timing["bench_s"] = round(time.monotonic() - t, 3)
            if bench is not None:
                result["bench"] = bench
            alive = bench_error is None and await self.measure.alive(endpoint)
            cells_failed = bench_error_summary(bench)
            if not alive or cells_failed:
                why = bench_error or cells_failed or "no cell error recorded"
                prefix = "the engine stopped answering during the benchmark" if not alive else "the benchmark failed"
                journal = await self._journal(cfg, result)
                return mark_failed(result, CRASHED, hostcode.explain_failure(f"{prefix} ({why})", journal), journal)

            t = time.monotonic()
            reference = self._load_reference()
            try:
                gates = await self.measure.gates(endpoint, cfg, reference)
            except (asyncio.CancelledError, Interrupted):
                raise
            except Exception as exc:
                alive = await self.measure.alive(endpoint)
                klass = GATE_FAILED if alive else CRASHED
                prefix = "gates raised" if alive else "the engine stopped answering during the gates"
                journal = [] if alive else await self._journal(cfg, result)
                return mark_failed(result, klass, f"{prefix}: {type(exc).__name__}: {exc}", journal)
            finally:
                timing["gates_s"] = round(time.monotonic() - t, 3)
            new_reference = gates.pop("lossless_reference", None)
            result["gates"] = gates
            if gates.get("skipped") is True:  # not gated on purpose: ok, but never eligible to win
                gates["passed"] = False
                return result
            if isinstance(gates.get("lossless"), dict):
                await self._scan_log(cfg, result, gates)
                if not gates["lossless"].get("passed"):
                    new_reference = None
            if reference is None and cfg.spec.algorithm == BASELINE and isinstance(new_reference, Mapping):
                write_json_atomic(
                    self.run_dir.lossless_reference,
                    {"label": cfg.label, "config": cfg.short(), "reference": new_reference},
                )
            if not gates.get("passed"):
                if not await self.measure.alive(endpoint):
                    return mark_failed(
                        result,
                        CRASHED,
                        "the engine stopped answering during the gates: " + "; ".join(failed_gates(gates)),
                        await self._journal(cfg, result),
                    )
                failed = failed_gates(gates) or ["gates did not pass (no gate named a reason)"]
                return mark_failed(result, GATE_FAILED, "; ".join(failed))
            return result
        finally:
            result["fingerprint"] = fingerprint.full_fingerprint(
                controller_fp, unit_sha256=unit_sha, sglang_version=version
            )

    async def _scan_log(self, cfg: PlannedConfig, result: Mapping[str, Any], gates: dict[str, Any]) -> None:
        """The invocation's journal, filtered on the host, into the lossless verdict (and the gates')."""
        invocation = (result.get("reconfigure") or {}).get("invocation_id") or None
        private = self.run_dir.runner_dir(cfg.label) / "journal-scan"
        try:
            lines = await asyncio.to_thread(functools.partial(
                self.reconfigurer.journal, private, lines=serverlog.SCAN_LINES, invocation_id=invocation,
                grep=serverlog.PATTERN,
            ))
        except Exception as exc:  # said, never silently clean
            lines = [f"(journal unavailable: {type(exc).__name__}: {exc})"]
        source = f"journal of invocation {invocation}" if invocation else "journal of the unit (no invocation id)"
        serverlog.apply(gates["lossless"], serverlog.scan(lines, source=source))
        gates["passed"] = bool(gates.get("passed") and gates["lossless"]["passed"])

    def _load_reference(self) -> Mapping[str, Any] | None:
        path = self.run_dir.lossless_reference
        if not path.is_file():
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
        ref = doc.get("reference") if isinstance(doc, dict) else None
        return ref if isinstance(ref, Mapping) else None

    @staticmethod
    def _finish(result: ConfigResult, t0: float) -> ConfigResult:
        result["finished_at"] = state.now_iso()
        result["wall_s"] = round(time.monotonic() - t0, 3)
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
        write_json_atomic(self.run_dir.result(cfg.label), result)
        return result

    # ------------------------------------------------------------ the loop

    async def run(self) -> SweepOutcome:
        return await self.run_guarded(self._run)

    async def run_guarded(self, body: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``body`` with this runner's Ctrl-C handling (cancel the config in flight, keep writes whole).

        The sweep's own loop runs this way; another loop over :meth:`run_config_and_write` (a tuner) can too."""
        loop = asyncio.get_running_loop()
        self.loop = loop
        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
            installed = True
        try:
            return await body()
        finally:
            if installed:
                loop.remove_signal_handler(signal.SIGINT)

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
