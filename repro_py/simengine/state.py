"""Shared state of one engine process: settings, phase, scheduler, metrics."""

from __future__ import annotations

import os
import time
from typing import Any

from repro_py.simengine import perf_model
from repro_py.simengine.faults import REQUEST_FAULTS
from repro_py.simengine.metrics import Metrics
from repro_py.simengine.scheduler import Scheduler
from repro_py.simengine.settings import Settings


def model_config(settings: Settings) -> perf_model.ModelConfig:
    spec = settings.spec
    return perf_model.ModelConfig(
        mode=spec.algorithm,
        block_size=spec.block_size or 8,
        budget=spec.budget,
        topk=spec.topk,
        window=spec.window,
        drafter_block_size=settings.drafter_block_size or (spec.block_size or 8),
        host=settings.host_profile,
        mask_offset_bug=settings.mask_offset_active,
    )


class EngineState:
    """Everything the handlers share; the lifecycle moves ``phase``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.phase = "warmup"  # warmup | ready | draining | lingering
        self.started = time.time()
        self.ready_at: float | None = None
        self.model_cfg = model_config(settings)
        self.metrics = Metrics(
            model_name=settings.served_model_name, speed=settings.speed, spec_enabled=settings.spec.algorithm != "none"
        )
        self.scheduler = Scheduler(
            self.model_cfg,
            speed=settings.speed,
            seed=settings.seed,
            max_running=settings.max_running_requests,
            kv_tokens=settings.kv_tokens,
            metrics=self.metrics,
            decode_log_interval=settings.decode_log_interval,
            kv_overrun=settings.faults.kv_overrun and settings.tree_mode,
        )
        self.generation_requests = 0
        self.in_flight = 0

    # ---- the sim dict shown in server info -------------------------------------------
    def sim_info(self) -> dict[str, Any]:
        s = self.settings
        pred = perf_model.predict(self.model_cfg, 1, 60)
        return {
            "engine": "repro_py.simengine",
            "speed": s.speed,
            "faults": list(s.faults.specs),
            "faults_active": self.active_faults(),
            "pid": os.getpid(),
            "phase": self.phase,
            "load_seconds": s.load_seconds,
            "warmup_seconds": s.warmup_seconds,
            "linger_seconds": s.linger_seconds,
            "health_seconds": s.health_seconds,
            "seed": s.seed,
            "host_profile": s.host_profile,
            "drafter_block_size": s.drafter_block_size,
            "generation_requests": self.generation_requests,
            "model_c1": {
                "accept_length": round(pred.accept_length, 4),
                "step_ms": round(pred.step_ms, 4),
                "tokens_per_s": round(pred.per_request_tps, 3),
                "note": "model time; wall time is model time / speed",
            },
            "pacing": self.scheduler.pacing.as_dict(),
            "note": "SIMULATED: figures come from a performance model of published numbers, not measurements",
        }

    def active_faults(self) -> list[str]:
        f = self.settings.faults
        active = []
        if f.never_ready:
            active.append("never-ready")
        if f.crash_after is not None:
            active.append(f"crash-after:{f.crash_after}")
        if self.settings.mask_offset_active:
            active.append("mask-offset")
        for name in REQUEST_FAULTS:
            threshold = getattr(f, name.replace("-", "_"))
            if threshold is not None:
                active.append(f"{name}:{threshold}")
        if self.scheduler.kv_overrun:
            active.append("kv-overrun")
        if self.settings.bonus_unadjusted_active:
            active.append("bonus-unadjusted")
        return active
