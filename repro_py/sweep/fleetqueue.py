"""The work queue of one hardware class in a fleet sweep: the configs waiting, the baseline first, who runs what,
and every attempt a config needed.

Each host of the class takes the next config when it is free. A config whose host was lost (unreachable, its
lease taken, or suspected after failing the same way twice in a row) goes back to the FRONT of the queue with that
attempt recorded, and another host of the class measures it; a config's own failure stays its own. The baseline
(``algorithm: none``) makes the references every later config's gates compare with: speculative configs may be
measured meanwhile, but their gates wait for what they read (:meth:`ClassQueue.wait_for_baseline`: the production
gates for the baseline's production stage, the lossless gate for its result), and a worker waiting there
gives its config back (:class:`YieldToBaseline`) when the baseline is back in the queue with nobody to run it,
so a lost baseline host never leaves the others waiting forever.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from repro_py.gates.lossless import BASELINE
from repro_py.results.failures import CRASHED, FAILED_TO_START
from repro_py.sweep.grid import PlannedConfig

#: failure classes a host can cause (a config that does not start or stops answering); a gate verdict or a
#: refused config is the config's own, however often it repeats
HOST_SUSPECT_CLASSES = (FAILED_TO_START, CRASHED)
_VOLATILE = re.compile(r"\b(?:pid|PID|invocation|port)[ =:]+\S+|\d+(?:\.\d+)?")


class YieldToBaseline(Exception):
    """Raised in a worker waiting for the baseline when the baseline waits for a host: give the config back."""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One measurement of a config that did not count: on which host, why (the infrastructure cause), and the
    failure that attempt ended in, if it ended in one."""

    host: str
    cause: str
    failure: Mapping[str, Any] | None
    at: str

    def as_dict(self) -> dict[str, Any]:
        failure = None if self.failure is None else {k: self.failure.get(k) for k in ("class", "reason")}
        return {"host": self.host, "cause": self.cause, "failure": failure, "at": self.at}


def failure_signature(failure: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """What makes two failures "the same way": the class and the reason with its numbers, PIDs and ports
    taken out; None for a failure a host cannot cause (:data:`HOST_SUSPECT_CLASSES`)."""
    if not failure or failure.get("class") not in HOST_SUSPECT_CLASSES:
        return None
    reason = _VOLATILE.sub("#", str(failure.get("reason") or ""))
    return str(failure.get("class")), reason


@dataclasses.dataclass
class ClassQueue:
    """The configs of one class still to measure (a new run: the plan's order, the baseline first)."""

    key: str
    configs: dataclasses.InitVar[Iterable[PlannedConfig]]
    #: hosts of the class still taking configs
    hosts: set[str] = dataclasses.field(default_factory=set)
    pending: collections.deque[PlannedConfig] = dataclasses.field(default_factory=collections.deque)
    running: dict[str, str] = dataclasses.field(default_factory=dict)  # label -> host
    attempts: dict[str, list[Attempt]] = dataclasses.field(default_factory=dict)
    baseline: str | None = None
    baseline_final: bool = True
    #: the baseline's production stage is done: its samples (the sampled gate's reference) are there
    baseline_produced: bool = True
    _changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def __post_init__(self, configs: Iterable[PlannedConfig]) -> None:
        for cfg in configs:
            self.pending.append(cfg)
            if cfg.spec.algorithm == BASELINE and self.baseline is None:
                self.baseline, self.baseline_final, self.baseline_produced = cfg.label, False, False
        if self.baseline is not None:  # the baseline goes first wherever the plan had it
            first = next(c for c in self.pending if c.label == self.baseline)
            self.pending.remove(first)
            self.pending.appendleft(first)

    # ------------------------------------------------------------ changes

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self) -> None:
        """Wait until the queue changes (a config taken, finished or given back, a host lost)."""
        await self._changed.wait()

    # ------------------------------------------------------------ taking and giving back

    def take(self, host: str) -> PlannedConfig | None:
        """The next config for ``host``, or None when none is pending now."""
        if not self.pending:
            return None
        cfg = self.pending.popleft()
        self.running[cfg.label] = host
        self._notify()
        return cfg

    def give_back(self, cfg: PlannedConfig, attempt: Attempt | None = None) -> None:
        """``cfg`` goes back to the front (the baseline before anything), with ``attempt`` recorded if given."""
        self.running.pop(cfg.label, None)
        if attempt is not None:
            self.attempts.setdefault(cfg.label, []).append(attempt)
        if cfg.label == self.baseline:
            self.pending.appendleft(cfg)
        else:
            at = 1 if self.pending and self.pending[0].label == self.baseline else 0
            self.pending.insert(at, cfg)
        self._notify()

    def finish(self, cfg: PlannedConfig) -> None:
        """``cfg`` has its result (ok or its own failure)."""
        self.running.pop(cfg.label, None)
        if cfg.label == self.baseline:
            self.baseline_final = True
        self._notify()

    def stage_done(self, cfg: PlannedConfig, stage: str) -> None:
        """A stage of ``cfg`` is done; the baseline's production stage makes what the others' production gates need."""
        if cfg.label == self.baseline and stage == "production":
            self.baseline_produced = True
            self._notify()

    def lose_host(self, host: str) -> None:
        self.hosts.discard(host)
        self._notify()

    # ------------------------------------------------------------ state

    def drained(self) -> bool:
        """Nothing pending and nothing running: the class is done (or has no host left to do it)."""
        return not self.pending and not self.running

    def stranded(self) -> list[PlannedConfig]:
        """Configs still pending with no host left to measure them."""
        return list(self.pending) if not self.hosts else []

    def attempts_of(self, label: str) -> list[dict[str, Any]]:
        return [a.as_dict() for a in self.attempts.get(label, [])]

    async def wait_for_baseline(self, lossless: bool = True) -> None:
        """Return once the baseline has made what a config's gates read: its result (``lossless``: the lossless
        gate reads its outputs, made in its last stage), else its production stage (the sampled gate's samples);
        raise :class:`YieldToBaseline` when the baseline is back in the queue and every host still here is waiting
        (so one of them must run it)."""
        while not (self.baseline_final or (not lossless and self.baseline_produced)):
            pending = any(c.label == self.baseline for c in self.pending)
            if pending:
                raise YieldToBaseline(f"{self.baseline} is back in the queue of {self.key}")
            await self.changed()
