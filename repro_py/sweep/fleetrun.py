"""A fleet sweep: every host of the selection measures the grid of its hardware class, side by side.

Per class, one work queue (:mod:`repro_py.sweep.fleetqueue`); per host, one worker taking the next config when it
is free, through that host's own reconfigurer and lease (:mod:`repro_py.sweep.fleethosts`) and the one-host
sweep's per-config stages unchanged (:class:`repro_py.sweep.configrun.ConfigRun`, the lossless restart included).

1. **Reference.** Every host restarts the inventory's default config and benchmarks it, side by side; each host's
   offset from its class median (:mod:`repro_py.sweep.fleetoffsets`) goes into every result it measures. A host
   beyond the offset limit is flagged and measures nothing; a host whose reference does not start is taken out.
2. **The queue.** The baseline first (its references are what the gates of every other config compare with; they
   wait for it). After a failed config the host is checked: unreachable, or its lease held by another run, takes
   the host out and gives the config back to the class's queue with that attempt recorded; so does failing the
   same way (class and reason) on two configs in a row while another host of the class is left: both configs are
   measured again elsewhere. Any other failure is the config's own result.
3. **The end.** Each host's default config is restored (after Ctrl-C too), side by side, and the leases given back;
   a host that could not be restored is named. Ctrl-C stops every host's work at once (the config in flight
   on each is given back, never half-written), and ``--resume`` continues with the hosts that are there.

Results: ``<run>/<class key>/configs/<label>.json`` (with ``host`` and ``attempts``), the hosts' record in
``<run>/fleet.json`` (written atomically as the run goes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from repro_py.atomicio import write_json_atomic
from repro_py.results.schema import ConfigResult
from repro_py.sweep import fingerprint, state
from repro_py.sweep.configrun import ConfigRun
from repro_py.sweep.errors import Interrupted
from repro_py.sweep.fleethosts import FleetHost, OneAtATime
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT, HostOffset, host_offsets
from repro_py.sweep.fleetqueue import Attempt, ClassQueue, YieldToBaseline, failure_signature
from repro_py.sweep.fleettasks import HostTasks, release_host, restore_host, restore_said
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.measure import Measure
from repro_py.sweep.plan import Plan

ACTIVE, EXCLUDED, FLAGGED, REFUSED = "active", "excluded", "flagged", "refused"
REFERENCE_LABEL = "reference"
RESTORE_LABEL = "restore-default"


@dataclasses.dataclass
class ClassRun:
    """One hardware class of the run: its plan (the grid, as every host of the class has it), its run directory,
    what measures it and its hosts."""

    key: str
    info: Mapping[str, Any]
    plan: Plan
    run_dir: state.RunDir
    measure: Measure
    hosts: list[FleetHost]


@dataclasses.dataclass
class FleetOptions:
    restore: bool = True
    retry_failed: bool = False
    offset_limit: float = DEFAULT_LIMIT


@dataclasses.dataclass
class HostState:
    host: FleetHost
    cls: ClassRun
    config_run: ConfigRun
    status: str = ACTIVE
    cause: str | None = None
    offset: HostOffset | None = None
    configs: list[str] = dataclasses.field(default_factory=list)
    restore: dict[str, Any] | None = None
    last_signature: tuple[str, str] | None = None
    last_config: PlannedConfig | None = None

    @property
    def name(self) -> str:
        return self.host.name


@dataclasses.dataclass
class FleetOutcome:
    interrupted: bool
    ran: list[str]
    skipped: list[str]
    failed: dict[str, str]
    #: configs no host of their class was left to measure
    stranded: list[str]
    hosts: dict[str, HostState]
    wall_s: float

    def not_restored(self) -> dict[str, str]:
        return {
            name: str((hs.restore or {}).get("reason") or (hs.restore or {}).get("status") or "not restored")
            for name, hs in self.hosts.items() if (hs.restore or {}).get("status") not in ("ok", "skipped")
        }  # fmt: skip


def _baseline_waiter(queue: ClassQueue) -> Callable[[PlannedConfig, bool], Awaitable[None]]:
    async def wait(_cfg: PlannedConfig, lossless: bool) -> None:
        await queue.wait_for_baseline(lossless)

    return wait


class FleetRunner:
    def __init__(
        self, run_path: Path, classes: list[ClassRun], *, bundle: Path, record: dict[str, Any],
        options: FleetOptions | None = None, console: Console | None = None,
    ) -> None:  # fmt: skip
        self.run_dir = state.RunDir(run_path)
        self.classes = classes
        self.bundle = bundle
        self.record = record
        self.options = options or FleetOptions()
        self.console = console or Console(stderr=True)
        self.host_tasks = HostTasks(self.console)
        self.cancel = self.host_tasks.cancel
        self.queues: dict[str, ClassQueue] = {}
        self.states: dict[str, HostState] = {}
        self.outcome = FleetOutcome(False, [], [], {}, [], {}, 0.0)

    # ------------------------------------------------------------ record and messages

    def say(self, host: str, what: str) -> None:
        self.console.print(f"[{host}] {what}", markup=False, highlight=False)
        self.record.setdefault("events", []).append({"at": state.now_iso(), "host": host, "what": what})

    def write_record(self) -> None:
        hosts = self.record.setdefault("hosts", {})
        for name, hs in self.states.items():
            hosts[name] = {
                **hosts.get(name, {}), "class": hs.cls.key, "status": hs.status, "cause": hs.cause,
                "offset": None if hs.offset is None else hs.offset.as_dict(), "configs": list(hs.configs),
                "restore": hs.restore, "endpoint": hs.host.target.endpoint.base_url,
            }  # fmt: skip
        write_json_atomic(self.run_dir.path / "fleet.json", self.record)

    def _fingerprint(self, cls: ClassRun, cfg: PlannedConfig) -> dict[str, str]:
        """The one-host fingerprint with the class in place of the host: any host of the class stands for it."""
        return {**fingerprint.controller_fingerprint(self.bundle, cls.plan.target, cfg), "host": f"class {cls.key}"}

    async def run(self) -> FleetOutcome:
        return await self.host_tasks.guarded(self._run)

    # ------------------------------------------------------------ the run

    def _setup(self) -> None:
        for cls in self.classes:
            todo: list[PlannedConfig] = []
            for cfg in cls.plan.configs:
                decision = state.decide(cls.run_dir, cfg.label, self._fingerprint(cls, cfg),
                                        retry_failed=self.options.retry_failed)  # fmt: skip
                if decision.run:
                    todo.append(cfg)
                else:
                    self.outcome.skipped.append(cfg.label)
                    self.console.print(f"[dim]{cls.key}: {escape(cfg.label)}: {escape(decision.reason)}; not rerun[/]")
            queue = ClassQueue(cls.key, todo, hosts={h.name for h in cls.hosts})
            self.queues[cls.key] = queue
            for host in cls.hosts:
                host.reconfigurer = OneAtATime(host.reconfigurer)
                run = ConfigRun(
                    dataclasses.replace(cls.plan, target=host.target), state.HostRunDir(cls.run_dir.path, host.name),
                    host.reconfigurer, cls.measure, self.cancel, self.console,
                    before_reference=_baseline_waiter(queue), on_stage=queue.stage_done,
                )  # fmt: skip
                self.states[host.name] = HostState(host, cls, run)

    async def _run(self) -> FleetOutcome:
        t0 = time.monotonic()
        self._setup()
        self.run_dir.write_state(state.STATE_RUNNING, hosts=sorted(self.states))
        for cls in self.classes:
            cls.run_dir.write_state(state.STATE_RUNNING, hosts=[h.name for h in cls.hosts])
        self.write_record()
        await self.host_tasks.phase([self._reference(hs) for hs in self.states.values()])
        if not self.cancel.is_set():
            self._offsets()
            await self.host_tasks.phase([self._worker(hs) for hs in self.states.values() if hs.status == ACTIVE])
        for queue in self.queues.values():
            self.outcome.stranded += [c.label for c in queue.pending]
        self.outcome.interrupted = self.cancel.is_set()
        await self._restore_all()
        self.outcome.hosts = self.states
        self.outcome.wall_s = time.monotonic() - t0
        self.record["wall_s"] = round(self.outcome.wall_s, 3)
        self.write_record()
        status = state.STATE_INTERRUPTED if self.outcome.interrupted else state.STATE_COMPLETE
        for cls in self.classes:
            cls.run_dir.write_state(status)
        self.run_dir.write_state(status, not_restored=self.outcome.not_restored(), stranded=self.outcome.stranded)
        return self.outcome

    # ------------------------------------------------------------ 1. reference

    def _take_out(self, hs: HostState, cause: str, status: str = EXCLUDED) -> None:
        hs.status, hs.cause = status, cause
        self.queues[hs.cls.key].lose_host(hs.name)
        self.say(hs.name, f"taken out of the run: {cause}")
        self.write_record()

    async def _reference(self, hs: HostState) -> None:
        cfg = hs.cls.plan.default_config
        if cfg is None:
            return
        private = state.HostRunDir(hs.cls.run_dir.path, hs.name).runner_dir(REFERENCE_LABEL)
        self.say(hs.name, f"measures the reference config {cfg.label}")
        restart = functools.partial(hs.host.reconfigurer.reconfigure, cfg, private, self.cancel)
        outcome = await asyncio.to_thread(restart)
        if self.cancel.is_set():
            return
        if not outcome.ok:
            cause = await asyncio.to_thread(hs.host.check)
            self._take_out(hs, cause or f"its reference config {cfg.label} did not start: {outcome.reason}")
            return
        try:
            bench = await hs.cls.measure.bench(hs.host.target.endpoint, cfg, hs.cls.plan.bench)
        except (asyncio.CancelledError, Interrupted):
            raise
        except Exception as exc:
            cause = await asyncio.to_thread(hs.host.check)
            self._take_out(hs, cause or f"its reference benchmark failed: {type(exc).__name__}: {exc}")
            return
        path = hs.cls.run_dir.path / "references" / f"{hs.name}.json"
        write_json_atomic(path, {"host": hs.name, "label": cfg.label, "config": cfg.short(), "bench": bench,
                                 "at": state.now_iso()})  # fmt: skip

    def _offsets(self) -> None:
        for cls in self.classes:
            if cls.plan.default_config is None:  # no reference to measure: no offsets (a one-class figure)
                continue
            refs: dict[str, Any] = {}
            for host in cls.hosts:
                if self.states[host.name].status != ACTIVE:
                    continue
                path = cls.run_dir.path / "references" / f"{host.name}.json"
                doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
                refs[host.name] = doc.get("bench")
            for name, offset in host_offsets(refs, limit=self.options.offset_limit).items():
                hs = self.states[name]
                hs.offset = offset
                self.say(name, f"reference: {offset.reason}")
                if offset.flagged:
                    self._take_out(hs, f"flagged: {offset.reason}", FLAGGED)
        self.write_record()

    # ------------------------------------------------------------ 2. the queue

    async def _worker(self, hs: HostState) -> None:
        queue = self.queues[hs.cls.key]
        while hs.status == ACTIVE and not self.cancel.is_set():
            cfg = queue.take(hs.name)
            if cfg is None:
                if queue.drained():
                    return
                await queue.changed()
                continue
            fp = self._fingerprint(hs.cls, cfg)
            t0 = time.monotonic()
            self.say(hs.name, f"{cfg.label}: starts")
            try:
                result = await hs.config_run.run(cfg, fp)
            except YieldToBaseline as exc:
                hs.cls.run_dir.partial(cfg.label).unlink(missing_ok=True)
                queue.give_back(cfg)
                self.say(hs.name, f"{cfg.label}: given back ({exc}); it runs the baseline first")
                continue
            except (asyncio.CancelledError, Interrupted):
                queue.give_back(cfg)
                return
            except Exception as exc:  # its restart or measurement raised: the host is out, the config goes elsewhere
                hs.cls.run_dir.partial(cfg.label).unlink(missing_ok=True)
                self._lose(hs, queue, f"its worker raised {type(exc).__name__}: {exc}", [(cfg, None)])
                return
            await self._settle(hs, queue, cfg, result, t0)

    async def _settle(self, hs: HostState, queue: ClassQueue, cfg: PlannedConfig, result: ConfigResult,
                      t0: float) -> None:  # fmt: skip
        failure = result["failure"]
        if failure is None:
            hs.last_signature, hs.last_config = None, None
            self._write(hs, queue, cfg, result, t0)
            return
        cause = await asyncio.to_thread(hs.host.check)
        if cause is not None:
            self._lose(hs, queue, cause, [(cfg, failure)])
            return
        signature = failure_signature(failure)
        previous = hs.last_config
        if signature is not None and signature == hs.last_signature and previous is not None and len(queue.hosts) > 1:
            earlier = hs.cls.run_dir.read_result(previous.label)
            cause = (f"failed the same way on two configs in a row ({previous.label}, {cfg.label}): "
                     f"{failure['class']}: {failure['reason']}")  # fmt: skip
            self._lose(hs, queue, cause, [(previous, None if earlier is None else earlier["failure"]), (cfg, failure)])
            return
        hs.last_signature, hs.last_config = signature, (cfg if signature is not None else None)
        self._write(hs, queue, cfg, result, t0)

    def _lose(self, hs: HostState, queue: ClassQueue, cause: str,
              items: list[tuple[PlannedConfig, Mapping[str, Any] | None]]) -> None:  # fmt: skip
        """Take ``hs`` out; its configs go to another host of the class, or stay failed if none is left."""
        self._take_out(hs, cause)
        for cfg, failure in items:
            attempt = Attempt(hs.name, cause, failure, state.now_iso())
            hs.cls.run_dir.partial(cfg.label).unlink(missing_ok=True)
            if cfg.label in hs.configs:
                hs.configs.remove(cfg.label)
            if queue.hosts:
                hs.cls.run_dir.result(cfg.label).unlink(missing_ok=True)  # its attempt keeps what it said
                queue.give_back(cfg, attempt)
                self.outcome.ran = [label for label in self.outcome.ran if label != cfg.label]
                self.outcome.failed.pop(cfg.label, None)
                self.say(hs.name, f"{cfg.label}: re-queued to another host of the class")
            else:
                queue.attempts.setdefault(cfg.label, []).append(attempt)
                doc = hs.cls.run_dir.read_result(cfg.label)
                if doc is not None:
                    doc["attempts"] = queue.attempts_of(cfg.label)
                    write_json_atomic(hs.cls.run_dir.result(cfg.label), doc)
                queue.finish(cfg)
                self.say(hs.name, f"{cfg.label}: no other host of the class is left; its failure stands")
        self.write_record()

    def _write(self, hs: HostState, queue: ClassQueue, cfg: PlannedConfig, result: ConfigResult, t0: float) -> None:
        offset = hs.offset
        result["run_id"] = self.run_dir.run_id
        result["host"] = {
            "name": hs.name, "class": hs.cls.key,
            "offset": None if offset is None else offset.offset,
            "offset_uncertainty": None if offset is None else offset.uncertainty,
        }  # fmt: skip
        result["host_class"] = {"key": hs.cls.key, **hs.cls.info}
        result["attempts"] = queue.attempts_of(cfg.label)
        result["finished_at"] = state.now_iso()
        result["wall_s"] = round(float(result["wall_s"]) + time.monotonic() - t0, 3)
        write_json_atomic(hs.cls.run_dir.result(cfg.label), result)
        hs.cls.run_dir.partial(cfg.label).unlink(missing_ok=True)
        hs.configs.append(cfg.label)
        self.outcome.ran.append(cfg.label)
        failure = result["failure"]
        if failure is not None:
            self.outcome.failed[cfg.label] = f"{failure['class']}: {failure['reason']}"
        status = "ok" if failure is None else f"{failure['class']}: {failure['reason']}"
        self.say(hs.name, f"{cfg.label}: {status} ({result['wall_s']:.1f} s)")
        queue.finish(cfg)
        self.write_record()

    # ------------------------------------------------------------ 3. the end

    async def _restore_all(self) -> None:
        if not self.options.restore:
            for hs in self.states.values():
                hs.restore = {"status": "skipped", "reason": "--no-restore"}
            await asyncio.gather(*(self._release(hs) for hs in self.states.values()))
            return
        await asyncio.gather(*(self._restore(hs) for hs in self.states.values()))

    async def _restore(self, hs: HostState) -> None:
        private = state.HostRunDir(hs.cls.run_dir.path, hs.name).runner_dir(RESTORE_LABEL)
        hs.restore = await restore_host(hs.host, hs.cls.plan.default_config, private, self.host_tasks.restore_cancel,
                                        cause=hs.cause)  # fmt: skip
        if "label" in hs.restore:
            self.say(hs.name, restore_said(hs.restore))
        await self._release(hs)

    async def _release(self, hs: HostState) -> None:
        said = await release_host(hs.host)
        self.console.print(f"[{hs.name}] {said}", markup=False, highlight=False)
