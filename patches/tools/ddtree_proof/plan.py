"""What the proof runs, what it expects to see, and how long it takes by design.

The workload: prompts over the target's working vocabulary, mixed lengths
(longer than the chunked-prefill size, so prefill is chunked), every fifth
extends an earlier one (the radix cache shares prefixes), and a few run to
the end of the context. The servers: a small KV pool (``--max-total-tokens``)
and sglang's own retraction test hook (SGLANG_TEST_RETRACT) so decode
retracts requests, the KV page invariant checker on every busy step
(SGLANG_CHECK_KV_PAGE_INVARIANTS with SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY).

Expected accepts come from ``draft_sim`` over the target's greedy streams
(computed on CPU before any server starts). The duration is planned from
the workload and stated assumptions (``STARTUP_S``, ``ITERATION_S``,
``REQUEST_S``: not measured here, no GPU was available to this work; the GPU
run prints its measured times next to them) and must fit ``TIME_LIMIT_S``.
The sampled part (sampled.py) adds two servers whose plan counts its requests
in waves of ``sampled.MAX_RUNNING``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from pathlib import Path

CONTEXT_LEN = 512
MAX_NEW_TOKENS = 64
CHUNKED_PREFILL = 64
MAX_TOTAL_TOKENS = 2048  # KV pool: 8 running requests near the context end do not fit: retraction
MAX_RUNNING = 8
RETRACT_INTERVAL = 10  # SGLANG_TEST_RETRACT_INTERVAL: a forced retraction every 10 forwards
NEAR_END_PROMPT = CONTEXT_LEN - 2 - MAX_NEW_TOKENS  # prompt + new tokens reach the last position
# Planning assumptions (a GPU run prints the measured times beside them).
STARTUP_S = 120.0  # process start, weights, CUDA graph capture, Triton compile of a tiny model
ITERATION_S = 0.060  # one scheduler iteration (a decode step or a prefill chunk) of a tiny model
REQUEST_S = 0.001  # per request of the sampled part: HTTP, scheduling, detokenization (batched calls)
TIME_LIMIT_S = 480.0  # the whole proof, servers included, on one GPU
SERVER_ENV = {
    "SGLANG_CHECK_KV_PAGE_INVARIANTS": "1",
    "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1",
    "SGLANG_TEST_RETRACT": "1",
    "SGLANG_TEST_RETRACT_INTERVAL": str(RETRACT_INTERVAL),
}
# The sampled part's servers: the invariant checks, no forced retraction (waves of many short requests).
SAMPLED_SERVER_ENV = {k: v for k, v in SERVER_ENV.items() if not k.startswith("SGLANG_TEST_RETRACT")}


@dataclasses.dataclass(frozen=True)
class Config:
    label: str
    block: int | None  # None: the baseline (no speculative decoding)
    budget: int | None
    overlap: bool
    sampled: bool = False  # the sampled part: the softened target, sampled requests


def configs(shapes: list[tuple[int, int]]) -> tuple[Config, list[Config]]:
    base = Config("baseline", None, None, True)
    tree = [
        Config(f"ddtree-b{budget}-bs{block}-{'overlap' if overlap else 'sync'}", block, budget, overlap)
        for block, budget in shapes
        for overlap in (True, False)
    ]
    return base, tree


def sampled_configs(block: int, budget: int) -> list[Config]:
    """The sampled part: the baseline and DDTree under sglang's default (overlap) scheduler."""
    return [Config("baseline-sampled", None, None, True, sampled=True),
            Config(f"ddtree-b{budget}-bs{block}-sampled", block, budget, True, sampled=True)]  # fmt: skip


def make_prompts(n: int, vocab: list[int], *, seed: int = 3, near_end: int = 4) -> list[list[int]]:
    """n prompts as token ids: mixed lengths (1 .. 300: most longer than a prefill chunk), every
    fifth extends an earlier one (shared prefixes), `near_end` reach the end of the context."""
    rng = random.Random(seed)
    lengths = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 300]
    out: list[list[int]] = []
    for i in range(n - near_end):
        length = lengths[i % len(lengths)] if i < len(lengths) else rng.randint(1, 300)
        if i >= len(lengths) and i % 5 == 0:
            base = rng.choice(out)[:292]
            out.append(base + [rng.choice(vocab) for _ in range(rng.randint(1, 8))])
        else:
            out.append([rng.choice(vocab) for _ in range(length)])
    out += [[rng.choice(vocab) for _ in range(NEAR_END_PROMPT)] for _ in range(near_end)]
    return out


@dataclasses.dataclass
class ServerPlan:
    config: Config
    prefill_iterations: int
    decode_iterations: int
    expected_deep_accepts: int | None = None  # None for the baseline
    expected_accepts_by_depth: dict[int, int] | None = None
    requests: int = 0  # the sampled part's requests (REQUEST_S each)

    @property
    def seconds(self) -> float:
        return STARTUP_S + (self.prefill_iterations + self.decode_iterations) * ITERATION_S + self.requests * REQUEST_S


def server_plan(cfg: Config, prompts: list[list[int]], verify_steps_per_prompt: list[int]) -> ServerPlan:
    """Iterations one server needs: prefill chunks (plus the re-prefills of forced retractions)
    and decode steps run MAX_RUNNING at a time (the longest request bounds the tail)."""
    chunks = sum(math.ceil(len(p) / CHUNKED_PREFILL) for p in prompts)
    decode = math.ceil(sum(verify_steps_per_prompt) / MAX_RUNNING) + max(verify_steps_per_prompt)
    forwards = chunks + decode
    refills = (forwards // RETRACT_INTERVAL) * math.ceil((CONTEXT_LEN // 2) / CHUNKED_PREFILL)
    return ServerPlan(cfg, chunks + refills, decode)


def sampled_plan(cfg: Config, requests: int, new_tokens: int, max_running: int) -> ServerPlan:
    """A sampled-part server: waves of max_running requests, each wave one prefill iteration
    (the prompts are short and shared) and new_tokens - 1 decode steps at most."""
    waves = math.ceil(requests / max_running)
    return ServerPlan(cfg, waves, waves * max(new_tokens - 1, 1), requests=requests)


def with_expectation(plan: ServerPlan, per_prompt: list) -> ServerPlan:
    """Attach the expected accepts (draft_sim.Expectation per prompt) to a DDTree server's plan."""
    by_depth: dict[int, int] = {}
    for e in per_prompt:
        for d, n in e.accepts_by_depth.items():
            by_depth[d] = by_depth.get(d, 0) + n
    plan.expected_accepts_by_depth = dict(sorted(by_depth.items()))
    plan.expected_deep_accepts = sum(n for d, n in by_depth.items() if d >= 2)
    return plan


def write_json(path: Path, plans: list[ServerPlan], total: float) -> None:
    configs = [
        {
            "label": p.config.label,
            "planned_s": p.seconds,
            "expected_accepts_by_depth": p.expected_accepts_by_depth,
            "expected_deep_accepts": p.expected_deep_accepts,
        }
        for p in plans
    ]
    path.write_text(json.dumps({"planned_s": total, "configs": configs}, indent=2))


def schedule_seconds(plans: list[ServerPlan], parallel: int) -> float:
    """Wall time of running the servers `parallel` at a time, longest first."""
    slots = [0.0] * max(1, parallel)
    for p in sorted(plans, key=lambda p: -p.seconds):
        i = slots.index(min(slots))
        slots[i] += p.seconds
    return max(slots)


def table(plans: list[ServerPlan], total: float, parallel: int) -> str:
    lines = [
        f"Plan (assumes {STARTUP_S:.0f} s per server start, {ITERATION_S * 1000:.0f} ms per scheduler "
        f"iteration and {REQUEST_S * 1000:.0f} ms per sampled request; {parallel} servers at a time; limit "
        f"{TIME_LIMIT_S:.0f} s):",
        "| config | prefill iterations | decode iterations | planned s | expected accepts by depth | "
        "expected accepts of depth >= 2 |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for p in plans:
        by_depth = "" if p.expected_accepts_by_depth is None else str(p.expected_accepts_by_depth)
        deep = "" if p.expected_deep_accepts is None else str(p.expected_deep_accepts)
        lines.append(f"| {p.config.label} | {p.prefill_iterations} | {p.decode_iterations} | {p.seconds:.0f} "
                     f"| {by_depth} | {deep} |")  # fmt: skip
    lines.append(f"Planned duration of the servers: {total:.0f} s (limit {TIME_LIMIT_S:.0f} s)")
    return "\n".join(lines)
