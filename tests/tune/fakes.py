"""A measure that answers from the simulated engine's performance model, with seeded noise (no processes).

For the tuner's unit tests. Each repeat is timed as the benchmark times it: C
requests of ``max_tokens`` tokens take the time to first token plus
``max_tokens - 1`` per-token times, the per-token time being the model's step
over its acceptance (``perf_model.predict`` at the cell), with normal noise of
``cv_at_512 * sqrt(512 / max_tokens)`` per repeat and a per-restart offset. So
short outputs read low, by a share that depends on the config, as they do on a
real engine. The repeats carry the benchmark client's fields (``output_tps``,
``wall_s``, ``output_tokens``, ``ttft_ms``, ``itl_chunk_ms``, ``itl_token_ms``).
Gates pass unless the label is in ``gate_fail``. With ``over_generation`` the
step and the acceptance are those of the sequence as it grows from the prompt
to ``max_tokens`` (the acceptance at the engine's 256-token context buckets,
as the simulated engine runs it), so a draft window the sequence outgrows
costs acceptance; without it (the unit tests' default) the model is read at the
prompt's length, where such a window reads as a full cache.
"""

from __future__ import annotations

import functools
import random
import statistics
from collections.abc import Collection, Mapping
from typing import Any

from repro_py.endpoint import Endpoint
from repro_py.gates import GATE_NAMES
from repro_py.simengine.perf_model import ModelConfig, accept_length, predict, step_ms
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.grid import PlannedConfig


def model_config(cfg: PlannedConfig) -> ModelConfig:
    s = cfg.spec
    return ModelConfig(mode=s.algorithm, block_size=s.block_size or 8, budget=s.budget, topk=s.topk, window=s.window)


def true_tps(cfg: PlannedConfig, context: int, concurrency: int) -> float:
    return predict(model_config(cfg), concurrency, context).aggregate_tps


@functools.lru_cache(maxsize=65536)
def _generation(model: ModelConfig, context: int, concurrency: int, max_tokens: int) -> tuple[float, float, float]:
    steps = [step_ms(model, concurrency, context + k) for k in range(max_tokens)]
    accepts = [accept_length(model, (context + k) // 256 * 256) for k in range(max_tokens)]
    per_token = statistics.fmean(s / a for s, a in zip(steps, accepts, strict=True))
    return per_token, statistics.fmean(accepts), statistics.fmean(steps)


def generation(cfg: PlannedConfig, context: int, concurrency: int, max_tokens: int) -> tuple[float, float, float]:
    """(time per token in ms, acceptance, step in ms) over a generation of ``max_tokens`` tokens from a
    ``context``-token prompt: the step at each sequence length, the acceptance at its 256-token context bucket."""
    return _generation(model_config(cfg), context, concurrency, max_tokens)


def true_tps_over_generation(cfg: PlannedConfig, context: int, concurrency: int, max_tokens: int) -> float:
    """Aggregate decode tokens/s over a generation of ``max_tokens`` tokens (:func:`generation`)."""
    return concurrency * 1000.0 / generation(cfg, context, concurrency, max_tokens)[0]


class ModelMeasure:
    def __init__(
        self,
        seed: int = 0,
        *,
        cv_at_512: float = 0.022,
        restart_cv: float = 0.01,
        gate_fail: set[str] | None = None,
        ttft_ms: float = 40.0,
        over_generation: bool = False,
    ) -> None:
        self.rng = random.Random(seed)
        self.over_generation = over_generation
        self.cv_at_512 = cv_at_512
        self.restart_cv = restart_cv
        self.gate_fail = set(gate_fail or ())
        self.ttft_ms = ttft_ms
        self.bench_calls: list[tuple[str, int, int, int, int]] = []
        self.gate_calls: list[str] = []
        self._offset: dict[str, float] = {}

    async def server_info(self, endpoint: Endpoint) -> dict[str, Any]:
        return {"kind": "simulated", "version": "0.5.23", "sim_speed": 1.0, "max_total_num_tokens": 400000}

    async def alive(self, endpoint: Endpoint) -> bool:
        return True

    def cell(self, cfg: PlannedConfig, context: int, concurrency: int, repeats: int, max_tokens: int) -> dict[str, Any]:
        offset = self._offset.setdefault(cfg.label, self.rng.gauss(0.0, self.restart_cv))
        pred = predict(model_config(cfg), concurrency, context)
        base_per_token, base_accept, base_step = (
            generation(cfg, context, concurrency, max_tokens) if self.over_generation
            else (pred.step_ms / pred.accept_length, pred.accept_length, pred.step_ms)
        )  # fmt: skip
        cv = self.cv_at_512 * (512.0 / max_tokens) ** 0.5
        reps = []
        accept = None if cfg.spec.algorithm == "none" else base_accept * (1.0 + self.rng.gauss(0.0, cv / 2))
        for _ in range(repeats):
            per_token = base_per_token / (1.0 + offset) / (1.0 + self.rng.gauss(0.0, cv))
            ttft = self.ttft_ms * (1.0 + context / 1000.0) * (1.0 + self.rng.gauss(0.0, 0.05))
            span_s = (ttft + (max_tokens - 1) * per_token) / 1000.0
            step = base_step * (1.0 + self.rng.gauss(0.0, 0.01))
            reps.append(
                {
                    "output_tps": concurrency * max_tokens / span_s,
                    "wall_s": span_s,
                    "output_tokens": concurrency * max_tokens,
                    "errors": 0,
                    "ok": concurrency,
                    "requests": concurrency,
                    "ttft_ms": {"p50": ttft, "p90": ttft * 1.1, "p99": ttft * 1.2},
                    "itl_chunk_ms": {"p50": step, "p90": step * 1.1, "p99": step * 1.3},
                    "itl_token_ms": {"p50": per_token, "p90": per_token * 1.05, "p99": per_token * 1.1},
                    "accept_length": None if accept is None else accept * (1.0 + self.rng.gauss(0.0, cv)),
                }
            )
        values = sorted(r["output_tps"] for r in reps)
        return {
            "context": context,
            "concurrency": concurrency,
            "status": "ok",
            "reason": None,
            "repeats": reps,
            "median": {"output_tps": values[len(values) // 2], "accept_length": accept},
            "cv": {"output_tps": cv},
            "noisy": False,
        }

    async def bench(self, endpoint: Endpoint, cfg: PlannedConfig, bench: BenchPlan) -> dict[str, Any]:
        cells = []
        for context in bench.contexts:
            for concurrency in bench.concurrency:
                self.bench_calls.append((cfg.label, context, concurrency, bench.repeats, bench.max_tokens))
                cells.append(self.cell(cfg, context, concurrency, bench.repeats, bench.max_tokens))
        return {"cells": cells, "settings": bench.as_dict()}

    async def gates(
        self, endpoint: Endpoint, cfg: PlannedConfig, reference: Mapping[str, Any] | None, *,
        which: Collection[str] = GATE_NAMES,
    ) -> dict[str, Any]:
        self.gate_calls.append(cfg.label)
        bad = cfg.label in self.gate_fail
        every: dict[str, Any] = {
            "coding": {
                "passed": not bad,
                "pass_rate": 0.0 if bad else 1.0,
                "reason": "0/14 passed, below the required 80%" if bad else None,
            },
            "lossless": {"passed": not bad, "reason": "6 of 6 prompts diverge; first at token 12" if bad else None},
            "config_echo": {"passed": True, "reason": None},
        }
        out: dict[str, Any] = {name: body for name, body in every.items() if name in which}
        out["passed"] = all(body["passed"] for body in out.values())
        if reference is None and not bad and "lossless" in which:
            out["lossless_reference"] = {"source": cfg.label, "outputs": {"p": [1, 2, 3]}}
        return out
