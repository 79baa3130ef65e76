"""What a tuning run on several hosts of one class counts and records (:mod:`repro_py.tune.fleetloop` runs it):
each host's state, the restarts (the book's, plus those that led nowhere and what the configs in flight may still
take; a final restore per host set aside; ``--max-restarts-per-host``), the run's wall time (the hosts measure
side by side), ``tune/fleet.json`` (rewritten atomically as the run goes, read back by ``--resume``), and the end:
every host restored and its lease given back."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from repro_py.atomicio import write_json_atomic
from repro_py.sweep.configrun import ConfigRun
from repro_py.sweep.fleethosts import FleetHost
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT, HostOffset
from repro_py.sweep.fleettasks import HostTasks, release_host, restore_host, restore_said, restore_tried
from repro_py.sweep.state import HostRunDir, now_iso
from repro_py.tune.book import TuneBook
from repro_py.tune.budget import Budget
from repro_py.tune.search import Search
from repro_py.tune.sweepio import Plan, PlannedConfig, RunDir

ACTIVE, EXCLUDED, FLAGGED = "active", "excluded", "flagged"
FLEET_FILE = "fleet.json"
RESTORE_LABEL = "restore-default"


@dataclasses.dataclass
class TuneHost:
    host: FleetHost
    config_run: ConfigRun
    status: str = ACTIVE
    cause: str | None = None
    offset: HostOffset | None = None
    configs: list[str] = dataclasses.field(default_factory=list)
    #: restarts made on this host by configs that left the search (given back, lost, flagged)
    spent: int = 0
    restore: dict[str, Any] | None = None
    stopped: str | None = None

    @property
    def name(self) -> str:
        return self.host.name


class FleetBook(TuneBook):
    def __init__(
        self, plan: Plan, search: Search, run_dir: RunDir, *, bundle: Path, budget: Budget, class_key: str,
        offset_limit: float = DEFAULT_LIMIT, console: Console | None = None,
    ) -> None:  # fmt: skip
        super().__init__(plan, search, run_dir, bundle=bundle, budget=budget, console=console)
        self.class_key = class_key
        self.offset_limit = offset_limit
        self.host_tasks = HostTasks(self.console)
        self.cancel = self.host_tasks.cancel
        self.hosts: dict[str, TuneHost] = {}
        #: label -> (host, restarts it may take) of the configs being measured
        self.flying: dict[str, tuple[str, int]] = {}
        self._t0 = time.monotonic()
        self._earlier_s = 0.0
        self.record: dict[str, Any] = {}

    # ------------------------------------------------------------ what the book counts differently

    def fingerprint(self, cfg: PlannedConfig) -> dict[str, str]:
        """The one-host fingerprint with the class in place of the host: any host of the class stands for it."""
        return {**super().fingerprint(cfg), "host": f"class {self.class_key}"}

    def replayed(self, label: str, doc: Mapping[str, Any]) -> None:
        name = str((doc.get("host") or {}).get("name") or "")
        if name in self.hosts:
            self.hosts[name].configs.append(label)

    def restarts_used(self) -> int:
        """The book's count, plus the restarts that led nowhere and what the configs in flight may still take."""
        extra = sum(need - 1 for _, need in self.flying.values())
        return super().restarts_used() + sum(h.spent for h in self.hosts.values()) + extra

    def reserve(self) -> int:
        """A final restore for every host the end will try to restore: an unreachable host is tried too (only one
        whose lease is another run's is not), so a host taken out keeps its restore set aside."""
        if not self.budget.restore or self.plan.default_config is None:
            return 0
        return sum(1 for h in self.hosts.values() if restore_tried(h.cause if h.status == EXCLUDED else None))

    def seconds_spent(self) -> float:
        """The hosts measure side by side: the run's own wall time, earlier sessions included."""
        return self._earlier_s + time.monotonic() - self._t0

    def host_restarts(self, hs: TuneHost) -> int:
        mine = [label for label in hs.configs if label in self.search.records]
        flying = sum(need for host, need in self.flying.values() if host == hs.name)
        return sum(self.restarts.get(label, 1) for label in mine) + flying + hs.spent

    def host_stop(self, hs: TuneHost, need: int) -> str | None:
        cap = self.budget.max_per_host
        restore = 1 if self.budget.restore and self.plan.default_config is not None else 0
        if cap is not None and self.host_restarts(hs) + need + restore > cap:
            return f"its restart budget reached: {self.host_restarts(hs)} of --max-restarts-per-host {cap} used"
        return None

    # ------------------------------------------------------------ record and messages

    def say(self, host: str, what: str) -> None:
        self.console.print(f"[{host}] {what}", markup=False, highlight=False)
        self.record.setdefault("events", []).append({"at": now_iso(), "host": host, "what": what})

    def write_record(self) -> None:
        self.record.update({
            "schema": 1, "class": self.class_key, "offset_limit": self.offset_limit,
            "wall_s": round(self.seconds_spent(), 3),
        })  # fmt: skip
        hosts = self.record.setdefault("hosts", {})
        for name, hs in self.hosts.items():
            hosts[name] = {
                "status": hs.status, "cause": hs.cause, "offset": None if hs.offset is None else hs.offset.as_dict(),
                "restarts": self.host_restarts(hs), "spent_restarts": hs.spent, "configs": list(hs.configs),
                "restore": hs.restore, "endpoint": hs.host.target.endpoint.base_url,
            }  # fmt: skip
        write_json_atomic(self.run_dir.path / "tune" / FLEET_FILE, self.record)

    def load_record(self) -> None:
        path = self.run_dir.path / "tune" / FLEET_FILE
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        self.record = doc if isinstance(doc, dict) else {}
        self._earlier_s = float(self.record.get("wall_s") or 0.0)
        for name, host in (self.record.get("hosts") or {}).items():
            if name in self.hosts and isinstance(host, Mapping):
                self.hosts[name].spent = int(host.get("spent_restarts") or 0)

    # ------------------------------------------------------------ 3. the end

    async def _restore_all(self) -> None:
        await asyncio.gather(*(self._restore(hs) for hs in self.hosts.values()))

    async def _restore(self, hs: TuneHost) -> None:
        if not self.budget.restore:
            hs.restore = {"status": "skipped", "reason": "--no-restore"}
        else:
            private = HostRunDir(self.run_dir.path, hs.name).runner_dir(RESTORE_LABEL)
            hs.restore = await restore_host(hs.host, self.plan.default_config, private,
                                            self.host_tasks.restore_cancel, cause=hs.cause)  # fmt: skip
            if "label" in hs.restore:
                self.say(hs.name, restore_said(hs.restore))
        said = await release_host(hs.host)
        self.console.print(f"[{hs.name}] {said}", markup=False, highlight=False)

    def _restore_summary(self) -> dict[str, Any]:
        """One restore status for the run (``ok`` when every host's was; else the first that was not) and each
        host's."""
        per_host = {name: hs.restore or {} for name, hs in self.hosts.items()}
        bad = {n: r for n, r in per_host.items() if r.get("status") not in ("ok", "skipped", "not_configured")}
        first = next(iter(per_host.values()), {})
        summary: dict[str, Any]
        if bad:
            name, restore = next(iter(bad.items()))
            summary = {"status": "failed", "reason": f"{name}: {restore.get('reason') or restore.get('status')}"}
        else:
            summary = {"status": first.get("status", "ok"), "reason": first.get("reason")}
        return {**summary, "hosts": per_host}
