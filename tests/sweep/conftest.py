"""Helpers for sweep tests: targets, fake reconfigurers and fake measures (no processes)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import pytest

from repro_py.endpoint import Endpoint
from repro_py.gates import GATE_NAMES
from repro_py.results.failures import FAILED_TO_START
from repro_py.sweep import plan as planmod
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target
from repro_py.sweep.reconfigure import ReconfigureOutcome

BUNDLE = Path(__file__).resolve().parents[2]


def make_target(*, simulated: bool = True, hostvars: Mapping[str, Any] | None = None) -> Target:
    return Target(
        inventory=Path("inventory/test"),
        host="testhost",
        hostvars=dict(hostvars or {}),
        endpoint=Endpoint("http://127.0.0.1:1"),
        engine_kind="simulated" if simulated else "real",
    )


def make_plan(
    raws: list[dict[str, object]],
    *,
    tmp_path: Path,
    default: dict[str, object] | None = None,
    simulated: bool = True,
    lossless_mode: str = "separate",
    hostvars: Mapping[str, Any] | None = None,
) -> planmod.Plan:
    allvars: dict[str, Any] = dict(hostvars or {})
    if default is not None:
        allvars["sweep_default_config"] = default
    return planmod.make_plan(
        make_target(simulated=simulated, hostvars=allvars),
        raws,
        grid_source="test",
        bench=BenchPlan(contexts=(60, 1024), concurrency=(1, 8), repeats=1, max_tokens=16),
        results_root=tmp_path / "results",
        lossless_mode=lossless_mode,
    )


class FakeReconfigurer:
    """Records calls; ``fail`` maps a label to a failure reason (``fail_deterministic``: only for a restart with
    deterministic inference); ``hook`` runs on each call."""

    def __init__(
        self,
        *,
        fail: Mapping[str, str] | None = None,
        fail_deterministic: Mapping[str, str] | None = None,
        hook: Callable[[PlannedConfig, int], None] | None = None,
    ) -> None:
        self.fail = dict(fail or {})
        self.fail_deterministic = dict(fail_deterministic or {})
        self.hook = hook
        self.calls: list[str] = []
        self.restores: list[bool] = []
        self.deterministic: list[bool] = []  # per call: whether deterministic inference was asked for
        self.closed = False
        self.journal_invocations: list[str | None] = []
        self.log: dict[str, list[str]] = {}  # label -> the lines its server logged (the log scan's input)
        self.current: str | None = None

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:
        self.calls.append(cfg.label)
        self.current = cfg.label
        self.restores.append(restore)
        self.deterministic.append(deterministic)
        private_dir.mkdir(parents=True, exist_ok=True)
        (private_dir / "called").write_text(cfg.label, encoding="utf-8")
        if self.hook is not None:
            self.hook(cfg, len(self.calls))
        failing = {**self.fail, **(self.fail_deterministic if deterministic else {})}
        if cfg.label in failing:
            return ReconfigureOutcome(
                ok=False,
                status="failed",
                wall_s=0.01,
                failure_class=FAILED_TO_START,
                reason=failing[cfg.label],
                journal=["engine: CUDA out of memory", "engine: exiting"],
                unit_sha256="u" * 64,
            )
        return ReconfigureOutcome(
            ok=True,
            status="ready",
            wall_s=0.01,
            time_to_ready_s=0.01,
            invocation_id=f"inv-{len(self.calls)}",
            main_pid=1000 + len(self.calls),
            changed=True,
            unit_sha256="a" * 64,
        )

    def journal(
        self, private_dir: Path, lines: int = 40, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        self.journal_invocations.append(invocation_id)
        if grep is not None:  # the gates' log scan: the planted lines of the config being served
            return [ln for ln in self.log.get(self.current or "", []) if re.search(grep, ln)]
        return ["engine: Segmentation fault", "systemd: sglang.service: Main process exited"]

    def close(self) -> None:
        self.closed = True


class SlowReconfigurer(FakeReconfigurer):
    """A host's restarts take a little while (so hosts interleave); ``lost_after``: from that call on, the host is
    gone (every restart fails as an unreachable host's does, and :meth:`check` says so)."""

    def __init__(self, *, lost_after: int | None = None, delay: float = 0.02, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lost_after = lost_after
        self.delay = delay
        self.lost = False

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:  # fmt: skip
        time.sleep(self.delay)
        if self.lost_after is not None and len(self.calls) + 1 >= self.lost_after:
            self.lost = True
        if self.lost:
            self.calls.append(cfg.label)
            self.restores.append(restore)
            return ReconfigureOutcome(ok=False, status="error", wall_s=0.01, failure_class=FAILED_TO_START,
                                      reason="task 'Take the host lease' unreachable: ssh: Connection refused")
        return super().reconfigure(cfg, private_dir, cancel, restore=restore, deterministic=deterministic)

    def check(self) -> str | None:
        return "unreachable: ssh: connect to host 127.0.0.1 port 31032: Connection refused" if self.lost else None


def bench_result(tps: float, *, accept: float | None = 4.0) -> dict[str, Any]:
    cells: list[dict[str, Any]] = []
    for context in (60, 1024):
        for conc in (1, 8):
            scale = conc * (0.9 if context == 1024 else 1.0)
            cells.append(
                {
                    "context": context,
                    "concurrency": conc,
                    "status": "ok",
                    "reason": None,
                    "repeats": [],
                    "median": {
                        "output_tps": tps * scale,
                        "output_tps_per_request": tps,
                        "ttft_ms": {"p50": 50.0, "p90": 60.0, "p99": 70.0},
                        "itl_ms": {"p50": 5.0, "p90": 6.0, "p99": 7.0},
                        "accept_length": accept,
                        "verify_steps": 10,
                        "errors": 0,
                        "requests": conc,
                    },
                    "cv": {"output_tps": 0.01},
                    "noisy": False,
                }
            )
    return {"cells": cells, "settings": {"contexts": [60, 1024], "concurrency": [1, 8]}}


class FakeMeasure:
    """``bench_fail`` labels raise and the engine is then dead; ``gate_fail`` labels fail a gate."""

    def __init__(
        self,
        *,
        tps: Mapping[str, float] | None = None,
        bench_fail: set[str] | None = None,
        gate_fail: set[str] | None = None,
    ) -> None:
        self.tps = dict(tps or {})
        self.bench_fail = set(bench_fail or ())
        self.gate_fail = set(gate_fail or ())
        self.current: str | None = None
        self.benched: list[str] = []
        self.gated: list[tuple[str, tuple[str, ...]]] = []  # (label, the gates asked for)
        self.references: list[tuple[str, Any]] = []
        self.dead = False
        self.lossless_reference_from_anyone = False

    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        self.dead = False
        return {"kind": "simulated", "version": "0.5.23", "sim_speed": 1.0, "max_total_num_tokens": 100000}

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        self.current = cfg.label
        self.benched.append(cfg.label)
        if cfg.label in self.bench_fail:
            self.dead = True
            raise ConnectionResetError("Connection reset by peer")
        return bench_result(self.tps.get(cfg.label, 100.0))

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        self.gated.append((cfg.label, tuple(sorted(which))))
        bad = cfg.label in self.gate_fail
        every: dict[str, Any] = {
            "coding": {"passed": not bad, "reason": "1/5 passed, below the required 80%" if bad else None},
            "lossless": {"passed": not bad, "reason": "6 of 6 prompts diverge; first at token 3" if bad else None},
            "config_echo": {"passed": True, "reason": None},
        }
        out: dict[str, Any] = {name: body for name, body in every.items() if name in which}
        out["passed"] = all(body["passed"] for body in out.values())
        if "lossless" not in which:
            return out
        self.references.append((cfg.label, None if reference is None else reference.get("source")))
        baseline = cfg.spec.algorithm == "none" or self.lossless_reference_from_anyone
        if reference is None and not bad and baseline:  # only the baseline makes one
            out["lossless_reference"] = {"source": cfg.label, "outputs": {"p": [1, 2, 3]}}
        return out

    async def alive(self, endpoint: Endpoint) -> bool:
        return not self.dead


@pytest.fixture
def bundle() -> Path:
    return BUNDLE
