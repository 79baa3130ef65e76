"""One config of a sweep: its restarts, benchmark and gates, in stages (:mod:`repro_py.sweep.lossless_restart`).

``production``  restart as configured (``runner/<label>/``; with ``--lossless-restart shared``, with deterministic
                inference), ``/server_info``, the benchmark, then the gates: all three, or the coding gate and the
                config echo when the lossless gate has a restart of its own
``lossless``    that restart: with deterministic inference (``runner/<label>.lossless-gate/``), the lossless gate
                against the baseline's reference, and the journal of THAT invocation scanned for the KV-window
                invariant and tracebacks (``gates.serverlog``); recorded in ``lossless_reconfigure``

Production first, then the gate's restart, config by config: the baseline (first in the plan) makes the
reference before any other config's gate restart, and each config is judged as soon as its gate restart is done.
A config that fails before its gates (it does not start, its benchmark fails, or a tuner drops it before the full
rung) costs no gate restart, and neither does a speculative config when there is no baseline reference to
compare with (its lossless gate says ``no_baseline``, restart ``none``). Anything that goes wrong in the lossless
stage (its restart fails to start, the gate raises, the engine stops answering) is the lossless gate's failure
with its cause (``gate_failed``), the production figures kept. The engine is left on the gate's restart
(deterministic inference) until the next config's or the final restore; so is a rollback's "last good" unit.

Between two stages the result so far is written to ``partial/<label>.json`` (atomic): an interruption during the
second stage leaves it, and ``--resume`` runs only the second (nothing measured twice, nothing lost). A partial
whose mode or fingerprint no longer match is discarded with the reason said.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from repro_py.atomicio import write_json_atomic
from repro_py.gates import GATE_NAMES, serverlog
from repro_py.gates.lossless import BASELINE, NO_BASELINE
from repro_py.results.failures import CRASHED, FAILED_TO_START, GATE_FAILED, bench_error_summary, failed_gates
from repro_py.results.lossless_mode import SHARED
from repro_py.results.schema import ConfigResult, ResultError, check_result, mark_failed, new_result
from repro_py.sweep import fingerprint, hostcode, state
from repro_py.sweep.errors import Interrupted
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.lossless_restart import (
    LOSSLESS_GATES,
    ON_NO_RESTART,
    ON_OWN_RESTART,
    PRODUCTION_GATES,
    LosslessRestart,
)
from repro_py.sweep.measure import Measure
from repro_py.sweep.plan import Plan
from repro_py.sweep.reconfigure import ReconfigureOutcome, Reconfigurer

PRODUCTION = "production"
LOSSLESS = "lossless"
PARTIAL_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class _GateError:
    error: str
    alive: bool


@dataclasses.dataclass
class ConfigRun:
    plan: Plan
    run_dir: state.RunDir
    reconfigurer: Reconfigurer
    measure: Measure
    cancel: threading.Event
    console: Console
    #: configs finished from a partial in this session (only their second stage ran)
    resumed: set[str] = dataclasses.field(default_factory=set)
    #: awaited before a speculative config's gates read the baseline's references (a fleet's hosts run configs
    #: side by side while one of them still measures the baseline), with whether they need its lossless reference
    #: (made in its lossless gate) or only what its production stage makes (the sampled gate's samples); None: the
    #: references are there already
    before_reference: Callable[[PlannedConfig, bool], Awaitable[None]] | None = None
    #: called when a stage of a config is done (``production``, ``lossless``), before the next starts
    on_stage: Callable[[PlannedConfig, str], None] | None = None

    @property
    def mode(self) -> LosslessRestart:
        return self.plan.lossless_restart

    def stages(self) -> tuple[str, ...]:
        return (PRODUCTION, LOSSLESS) if self.mode.own_restart else (PRODUCTION,)

    # ------------------------------------------------------------ the config

    async def run(self, cfg: PlannedConfig, controller_fp: Mapping[str, str]) -> ConfigResult:
        t0 = time.monotonic()
        stages = self.stages()
        result, done = self._resume(cfg, controller_fp, stages)
        try:
            for stage in stages:
                if stage in done:
                    continue
                final = await (self._production(cfg, result) if stage == PRODUCTION else self._lossless(cfg, result))
                if final:
                    return result
                done.append(stage)
                if len(done) < len(stages):
                    self._write_partial(cfg, result, done, controller_fp, t0)
                if self.on_stage is not None:
                    self.on_stage(cfg, stage)
            return self._conclude(result)
        finally:
            result["fingerprint"] = fingerprint.full_fingerprint(
                controller_fp, unit_sha256=result["reconfigure"].get("unit_sha256"),
                sglang_version=result["engine"].get("version"),
            )  # fmt: skip

    def _new(self, cfg: PlannedConfig) -> ConfigResult:
        result = new_result(
            run_id=self.run_dir.run_id, label=cfg.label, config=cfg.short(), extra_vars=cfg.extra_vars,
            engine_kind=self.plan.target.engine_kind,
            bench_settings={**self.plan.bench.as_dict(), **cfg.sampling.as_dict()},
            started_at=state.now_iso(), sampling=cfg.sampling.as_dict(),
        )  # fmt: skip
        result["lossless_restart"] = self.mode.mode
        return result

    # ------------------------------------------------------------ partial results

    def _write_partial(
        self, cfg: PlannedConfig, result: ConfigResult, done: list[str], controller_fp: Mapping[str, str], t0: float
    ) -> None:
        so_far = {**result, "wall_s": round(float(result["wall_s"]) + time.monotonic() - t0, 3)}
        write_json_atomic(self.run_dir.partial(cfg.label), {
            "schema": PARTIAL_SCHEMA, "label": cfg.label, "mode": self.mode.mode, "stages_done": list(done),
            "controller_fingerprint": dict(controller_fp), "result": so_far,
        })  # fmt: skip

    def _resume(
        self, cfg: PlannedConfig, controller_fp: Mapping[str, str], stages: tuple[str, ...]
    ) -> tuple[ConfigResult, list[str]]:
        """The result so far and the stages done: from ``partial/<label>.json`` when it still stands, else new."""
        path = self.run_dir.partial(cfg.label)
        if not path.is_file():
            return self._new(cfg), []
        why = ""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            done = [str(s) for s in doc.get("stages_done") or []]
            same, differ = fingerprint.matches(doc.get("controller_fingerprint"), controller_fp)
            if doc.get("schema") != PARTIAL_SCHEMA or doc.get("label") != cfg.label or not done:
                why = "not a partial result of this config"
            elif doc.get("mode") != self.mode.mode or tuple(done) != stages[: len(done)] or len(done) >= len(stages):
                why = f"measured with --lossless-restart {doc.get('mode')}, stages {done}"
            elif not same:
                why = "fingerprint changed: " + ", ".join(differ)
            else:
                result = check_result(doc.get("result"), path)
                self.resumed.add(cfg.label)
                left = ", ".join(s for s in stages if s not in done)
                self.console.print(
                    f"[yellow]{cfg.label}: its {', '.join(done)} stage ran in an earlier session (kept); only its "
                    f"{left} restart runs now[/]"
                )
                return result, done
        except (OSError, ValueError, AttributeError, ResultError) as exc:
            why = f"unreadable: {exc}"
        path.unlink(missing_ok=True)
        self.console.print(f"[yellow]{cfg.label}: partial result discarded ({escape(why)}); the config runs whole[/]")
        return self._new(cfg), []

    # ------------------------------------------------------------ restarts and journals

    async def _restart(
        self, cfg: PlannedConfig, private_dir: Path, result: ConfigResult, *, deterministic: bool, timing_key: str
    ) -> ReconfigureOutcome:
        t = time.monotonic()
        outcome = await asyncio.to_thread(functools.partial(
            self.reconfigurer.reconfigure, cfg, private_dir, self.cancel, deterministic=deterministic,
        ))  # fmt: skip
        result["timing"][timing_key] = round(time.monotonic() - t, 3)
        if self.cancel.is_set() or outcome.status == "canceled":
            raise Interrupted
        return outcome

    async def _journal(
        self, private_dir: Path, invocation: str | None, *, grep: str | None = None, lines: int = 40
    ) -> list[str]:
        """The journal of one invocation (never an earlier run's lines); ``grep``: only the matching lines."""
        try:
            return await asyncio.to_thread(functools.partial(
                self.reconfigurer.journal, private_dir, lines=lines, invocation_id=invocation or None, grep=grep,
            ))  # fmt: skip
        except Exception as exc:  # best effort, and said
            return [f"(journal unavailable: {type(exc).__name__}: {exc})"]

    async def _scan_log(self, private_dir: Path, invocation: str | None, lossless: dict[str, Any]) -> None:
        """The invocation's journal, filtered on the host, into the lossless verdict."""
        lines = await self._journal(
            private_dir / "journal-scan", invocation, grep=serverlog.PATTERN, lines=serverlog.SCAN_LINES
        )
        source = f"journal of invocation {invocation}" if invocation else "journal of the unit (no invocation id)"
        serverlog.apply(lossless, serverlog.scan(lines, source=source))

    def _load_reference(self) -> Mapping[str, Any] | None:
        path = self.run_dir.lossless_reference
        if not path.is_file():
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
        ref = doc.get("reference") if isinstance(doc, dict) else None
        return ref if isinstance(ref, Mapping) else None

    def _keep_reference(
        self, cfg: PlannedConfig, had: Mapping[str, Any] | None, lossless: Mapping[str, Any], made: object
    ) -> None:
        """The baseline's outputs become the run's reference when its lossless gate made one and passed."""
        if had is None and cfg.spec.algorithm == BASELINE and lossless.get("passed") and isinstance(made, Mapping):
            write_json_atomic(
                self.run_dir.lossless_reference, {"label": cfg.label, "config": cfg.short(), "reference": made}
            )

    # ------------------------------------------------------------ stages

    async def _production(self, cfg: PlannedConfig, result: ConfigResult) -> bool:
        """The restart that gives the figures, the benchmark and its gates; True when the result is final."""
        timing = result["timing"]
        private = self.run_dir.runner_dir(cfg.label)
        endpoint = self.plan.target.endpoint
        outcome = await self._restart(cfg, private, result, deterministic=self.mode.mode == SHARED,
                                      timing_key="reconfigure_s")  # fmt: skip
        result["reconfigure"] = {**outcome.as_result(), "deterministic_inference": self.mode.production_deterministic}
        if outcome.time_to_ready_s is not None:
            timing["load_s"] = float(outcome.time_to_ready_s)
        if not outcome.ok:
            mark_failed(result, outcome.failure_class or FAILED_TO_START, outcome.reason or "", outcome.journal)
            return True
        invocation = outcome.invocation_id

        t = time.monotonic()
        try:
            result["engine"] = await self.measure.server_info(endpoint)
        except Exception as exc:
            why = f"reported ready, but /server_info failed: {type(exc).__name__}: {exc}"
            mark_failed(result, FAILED_TO_START, why, await self._journal(private / "journal", invocation))
            return True
        timing["server_info_s"] = round(time.monotonic() - t, 3)

        t = time.monotonic()
        bench_error: str | None = None
        try:
            result["bench"] = await self.measure.bench(endpoint, cfg, self.plan.bench)
        except (asyncio.CancelledError, Interrupted):
            raise
        except Exception as exc:
            bench_error = f"{type(exc).__name__}: {exc}"
        timing["bench_s"] = round(time.monotonic() - t, 3)
        alive = bench_error is None and await self.measure.alive(endpoint)
        cells_failed = bench_error_summary(result["bench"] if bench_error is None else None)
        if not alive or cells_failed:
            why = bench_error or cells_failed or "no cell error recorded"
            prefix = "the engine stopped answering during the benchmark" if not alive else "the benchmark failed"
            journal = await self._journal(private / "journal", invocation)
            mark_failed(result, CRASHED, hostcode.explain_failure(f"{prefix} ({why})", journal), journal)
            return True
        return await self._production_gates(cfg, result, invocation)

    async def _ask_gates(
        self, cfg: PlannedConfig, result: ConfigResult, reference: Mapping[str, Any] | None,
        which: Collection[str], *, timing_key: str,
    ) -> dict[str, Any] | _GateError:
        """The measure's gates; an exception is returned with whether the engine still answers (an interrupt
        propagates)."""
        endpoint = self.plan.target.endpoint
        t = time.monotonic()
        try:
            return await self.measure.gates(endpoint, cfg, reference, which=which)
        except (asyncio.CancelledError, Interrupted):
            raise
        except Exception as exc:
            return _GateError(f"{type(exc).__name__}: {exc}", await self.measure.alive(endpoint))
        finally:
            result["timing"][timing_key] = round(time.monotonic() - t, 3)

    async def _await_reference(self, cfg: PlannedConfig, *, lossless: bool) -> None:
        if self.before_reference is not None and cfg.spec.algorithm != BASELINE:
            await self.before_reference(cfg, lossless)

    async def _production_gates(self, cfg: PlannedConfig, result: ConfigResult, invocation: str | None) -> bool:
        which = PRODUCTION_GATES if self.mode.own_restart else GATE_NAMES
        await self._await_reference(cfg, lossless="lossless" in which)
        endpoint = self.plan.target.endpoint
        private = self.run_dir.runner_dir(cfg.label)
        reference = self._load_reference() if "lossless" in which else None
        gates = await self._ask_gates(cfg, result, reference, which, timing_key="gates_s")
        if isinstance(gates, _GateError):
            prefix = "gates raised" if gates.alive else "the engine stopped answering during the gates"
            journal = [] if gates.alive else await self._journal(private / "journal", invocation)
            mark_failed(result, GATE_FAILED if gates.alive else CRASHED, f"{prefix}: {gates.error}", journal)
            return True
        made = gates.pop("lossless_reference", None)
        if gates.get("skipped") is True:  # not gated on purpose: ok, but never eligible to win
            result["gates"] = {**gates, "passed": False}
            return True
        if "lossless" not in which:  # its own restart judges it (a measure's answer here would be another engine's)
            gates.pop("lossless", None)
        if isinstance(gates.get("lossless"), dict):  # the lossless gate ran on this restart
            gates["lossless"]["restart"] = self.mode.gate_runs_on
            await self._scan_log(private, invocation, gates["lossless"])
            gates["passed"] = bool(gates.get("passed") and gates["lossless"]["passed"])
            self._keep_reference(cfg, reference, gates["lossless"], made)
        result["gates"] = gates
        if not gates.get("passed") and not await self.measure.alive(endpoint):
            reason = "the engine stopped answering during the gates: " + "; ".join(failed_gates(gates))
            mark_failed(result, CRASHED, reason, await self._journal(private / "journal", invocation))
            return True
        return False

    async def _lossless(self, cfg: PlannedConfig, result: ConfigResult) -> bool:
        """The lossless gate in its own restart with deterministic inference; never final (its failures are the
        gate's, with their cause)."""
        await self._await_reference(cfg, lossless=True)
        reference = self._load_reference()
        if reference is None and cfg.spec.algorithm != BASELINE:  # a restart that could judge nothing: not made
            self._merge_lossless(result, {
                "passed": False, "verdict": "no_baseline", "restart": ON_NO_RESTART,
                "reason": f"{NO_BASELINE}; its restart with deterministic inference was not made (nothing to judge)",
            })  # fmt: skip
            return False
        private = self.run_dir.gate_runner_dir(cfg.label)
        outcome = await self._restart(cfg, private, result, deterministic=True, timing_key="lossless_reconfigure_s")
        result["lossless_reconfigure"] = {**outcome.as_result(), "deterministic_inference": True}
        if outcome.time_to_ready_s is not None:
            result["timing"]["lossless_load_s"] = float(outcome.time_to_ready_s)
        if not outcome.ok:
            lossless: dict[str, Any] = {
                "passed": False, "verdict": "restart_failed", "restart": ON_OWN_RESTART,
                "reason": f"its restart with deterministic inference did not serve "
                          f"({outcome.failure_class or FAILED_TO_START}): {outcome.reason}",
                "journal": list(outcome.journal),
            }  # fmt: skip
        else:
            lossless = await self._lossless_gate(cfg, result, reference, outcome.invocation_id)
        self._merge_lossless(result, lossless)
        return False

    @staticmethod
    def _merge_lossless(result: ConfigResult, lossless: dict[str, Any]) -> None:
        gates = result["gates"]  # the production restart's (coding, config echo), passed over those
        gates["lossless"] = lossless
        gates["passed"] = bool(gates.get("passed") and lossless.get("passed"))

    async def _lossless_gate(
        self, cfg: PlannedConfig, result: ConfigResult, reference: Mapping[str, Any] | None, invocation: str | None
    ) -> dict[str, Any]:
        private = self.run_dir.gate_runner_dir(cfg.label)
        gates = await self._ask_gates(cfg, result, reference, LOSSLESS_GATES, timing_key="lossless_gate_s")
        if isinstance(gates, _GateError):
            where = "raised" if gates.alive else "failed: the engine stopped answering during it"
            return {
                "passed": False, "verdict": "gate_error", "restart": ON_OWN_RESTART,
                "reason": f"the lossless gate on its restart with deterministic inference {where}: {gates.error}",
                "journal": [] if gates.alive else await self._journal(private / "journal", invocation),
            }  # fmt: skip
        made = gates.pop("lossless_reference", None)
        lossless: dict[str, Any] = dict(gates.get("lossless") or {"passed": False, "reason": "no lossless result"})
        lossless["restart"] = ON_OWN_RESTART
        await self._scan_log(private, invocation, lossless)
        self._keep_reference(cfg, reference, lossless, made)
        return lossless

    @staticmethod
    def _conclude(result: ConfigResult) -> ConfigResult:
        gates = result["gates"]
        if gates.get("passed"):
            return result
        failed = failed_gates(gates) or ["gates did not pass (no gate named a reason)"]
        lossless = gates.get("lossless")
        journal = list(lossless.get("journal") or []) if isinstance(lossless, Mapping) else []
        return mark_failed(result, GATE_FAILED, "; ".join(failed), journal)
