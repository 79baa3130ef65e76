"""What a tuning run optimises (objectives) and what a winner must meet (SLOs).

Objectives (each one benchmark cell; the figure is aggregate output tok/s, the
sweep report's own definitions):

``single-stream``  concurrency 1 at the short context (default 60 tokens)
``throughput``     concurrency ``--concurrency`` (default 32) at the short context
``long-context``   concurrency 1 at ``--long-context`` (default 4096 tokens)

SLOs (``--slo METRIC<=VALUE`` or ``METRIC>=VALUE``, repeatable): a winner must
meet every one. ``ttft_p50_ms``, ``ttft_p99_ms``, ``itl_p50_ms``,
``itl_p99_ms`` (the gap between streamed chunks, the benchmark's
``itl_chunk_ms``: the stall a reader sees), ``itl_token_p50_ms``,
``itl_token_p99_ms`` (time per output token, the benchmark's
``itl_token_ms``) are read at the objective's own cell; ``single_stream_tps``,
``throughput_tps``, ``long_context_tps`` at that objective's cell (measured
for every config when used); ``coding_pass_rate`` (0..1) from the coding gate.
Latency percentiles do not depend on the output length, so a config that
clearly violates a latency SLO is dropped at the first (short) rung already;
throughput SLOs are only judged at full length.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

SHORT_CONTEXT = 60
DEFAULT_CONCURRENCY = 32
DEFAULT_LONG_CONTEXT = 4096
OBJECTIVE_NAMES: tuple[str, ...] = ("single-stream", "throughput", "long-context")


class ObjectiveError(ValueError):
    """A bad objective or SLO; the message names the value and what is allowed."""


@dataclasses.dataclass(frozen=True, order=True)
class Cell:
    context: int
    concurrency: int

    def __str__(self) -> str:
        return f"context {self.context} x concurrency {self.concurrency}"


@dataclasses.dataclass(frozen=True)
class Objective:
    key: str  # one of OBJECTIVE_NAMES
    title: str
    cell: Cell

    @property
    def metric(self) -> str:
        return f"{self.key.replace('-', '_')}_tps"


def make_objectives(
    names: Sequence[str],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    long_context: int = DEFAULT_LONG_CONTEXT,
    short_context: int = SHORT_CONTEXT,
) -> tuple[Objective, ...]:
    """Objectives in the order given (the first is the one written back); duplicates refused."""
    if concurrency < 2:
        raise ObjectiveError(f"--concurrency {concurrency}: the throughput objective needs 2 or more")
    if long_context <= short_context:
        raise ObjectiveError(f"--long-context {long_context}: must be longer than the short context {short_context}")
    table = {
        "single-stream": Objective("single-stream", "single-stream latency", Cell(short_context, 1)),
        "throughput": Objective(
            "throughput", f"throughput at concurrency {concurrency}", Cell(short_context, concurrency)
        ),
        "long-context": Objective("long-context", f"long context ({long_context} tokens)", Cell(long_context, 1)),
    }
    out: list[Objective] = []
    for name in names:
        key = name.strip().lower().replace("_", "-")
        if key not in table:
            raise ObjectiveError(f"--objective {name!r} is not known; allowed: {', '.join(OBJECTIVE_NAMES)}")
        if any(o.key == key for o in out):
            raise ObjectiveError(f"--objective {key} is given twice")
        out.append(table[key])
    if not out:
        raise ObjectiveError(f"--objective is required; allowed: {', '.join(OBJECTIVE_NAMES)}")
    return tuple(out)


# ---------------------------------------------------------------- SLOs

#: metric -> (kind, unit). kind: "latency" (per objective cell), "tps" (an objective's cell), "gate".
SLO_METRICS: dict[str, tuple[str, str]] = {
    "ttft_p50_ms": ("latency", "ms"),
    "ttft_p99_ms": ("latency", "ms"),
    "itl_p50_ms": ("latency", "ms"),
    "itl_p99_ms": ("latency", "ms"),
    "itl_token_p50_ms": ("latency", "ms"),
    "itl_token_p99_ms": ("latency", "ms"),
    "single_stream_tps": ("tps", "tok/s"),
    "throughput_tps": ("tps", "tok/s"),
    "long_context_tps": ("tps", "tok/s"),
    "coding_pass_rate": ("gate", ""),
}
_SLO_RE = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=)\s*([0-9]+(?:\.[0-9]+)?)\s*$")


@dataclasses.dataclass(frozen=True)
class Slo:
    metric: str
    op: str  # "<=" | ">="
    value: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    @property
    def kind(self) -> str:
        return SLO_METRICS[self.metric][0]

    def met(self, observed: float) -> bool:
        return observed <= self.value if self.op == "<=" else observed >= self.value

    def clearly_violated(self, low: float, high: float) -> bool:
        """The whole confidence interval ``[low, high]`` is on the wrong side."""
        return low > self.value if self.op == "<=" else high < self.value


def parse_slo(text: str) -> Slo:
    match = _SLO_RE.match(text)
    if not match:
        raise ObjectiveError(
            f"--slo {text!r}: expected METRIC<=VALUE or METRIC>=VALUE, e.g. ttft_p99_ms<=2000; "
            f"metrics: {', '.join(SLO_METRICS)}"
        )
    metric, op, value = match.group(1), match.group(2), float(match.group(3))
    if metric not in SLO_METRICS:
        raise ObjectiveError(f"--slo {text!r}: metric {metric!r} is not known; allowed: {', '.join(SLO_METRICS)}")
    if metric == "coding_pass_rate" and not 0.0 <= value <= 1.0:
        raise ObjectiveError(f"--slo {text!r}: coding_pass_rate is a fraction 0..1")
    return Slo(metric, op, value)


def slo_cells(slos: Sequence[Slo], objectives: Sequence[Objective], all_objectives: Sequence[Objective]) -> list[Cell]:
    """Extra cells the SLOs need beyond the objectives' own (a throughput SLO names another objective's cell)."""
    have = {o.cell for o in objectives}
    extra: list[Cell] = []
    for slo in slos:
        if slo.kind != "tps":
            continue
        for obj in all_objectives:
            if obj.metric == slo.metric and obj.cell not in have and obj.cell not in extra:
                extra.append(obj.cell)
    return extra


# ---------------------------------------------------------------- reading bench cells


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


#: SLO metric family -> the benchmark's percentile blocks that carry it, first found wins (``itl_ms`` is the
#: per-chunk ITL's name in results written before per-token ITL was measured; the sweep report reads it too).
LATENCY_BLOCKS: dict[str, tuple[str, ...]] = {
    "ttft": ("ttft_ms",),
    "itl": ("itl_chunk_ms", "itl_ms"),
    "itl_token": ("itl_token_ms",),
}


def valid_repeats(cell: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The repeats of a finished cell that are measurements: every request of the repeat succeeded (a repeat
    with a failed request measured only the requests that happened to succeed)."""
    if not cell or cell.get("status") != "ok":
        return []
    return [
        rep
        for rep in cell.get("repeats") or []
        if isinstance(rep, Mapping) and not (rep.get("errors") or 0) > 0 and rep.get("ok", 1)
    ]


def repeat_value(rep: Mapping[str, Any], metric: str) -> float | None:
    """One repeat's ``output_tps``, ``accept_length`` (counters) or latency percentile such as ``ttft_p99_ms`` or
    ``itl_token_p50_ms``."""
    if metric in ("output_tps", "accept_length"):
        value = _num(rep.get(metric))
    else:
        family, _, pct = metric.removesuffix("_ms").rpartition("_")
        value = None
        for name in LATENCY_BLOCKS.get(family, ()):
            block = rep.get(name)
            if isinstance(block, Mapping):
                value = _num(block.get(pct))
                break
    return value if value is not None and value > 0 else None


def repeat_values(cell: Mapping[str, Any] | None, metric: str) -> list[float]:
    """Per-repeat figures of a finished cell (:func:`repeat_value`) over its valid repeats."""
    return [v for rep in valid_repeats(cell) if (v := repeat_value(rep, metric)) is not None]


def accept_length(cell: Mapping[str, Any] | None) -> float | None:
    """The counter-derived acceptance length of a finished cell (pooled over its repeats)."""
    if not cell or cell.get("status") != "ok":
        return None
    return _num((cell.get("median") or {}).get("accept_length"))


def step_values(cell: Mapping[str, Any] | None) -> list[float]:
    """Per valid repeat with counters, the decode step time: the time per output token (the client's
    ``itl_token_ms`` median over requests: first to last text chunk over the tokens between, which chunks
    arriving in bursts do not move) times the tokens one verify step commits (the repeat's acceptance length
    from the server's counters). The gaps between streamed chunks are no measure of it: a loaded client reads
    chunks in bursts, and at concurrency 32 their median fell to a hundredth of the step. Without counters
    (the baseline, a server without ``/metrics``) there is no step time; the surrogate then models tok/s."""
    out: list[float] = []
    for rep in valid_repeats(cell):
        per_token, accept = repeat_value(rep, "itl_token_p50_ms"), repeat_value(rep, "accept_length")
        if per_token is not None and accept is not None:
            out.append(per_token * accept)
    return out


def step_ms(cell: Mapping[str, Any] | None) -> float | None:
    """The decode step time of a finished cell: the median over its repeats of :func:`step_values`."""
    values = step_values(cell)
    return statistics.median(values) if values else None


def find_cell(cells: Sequence[Mapping[str, Any]], cell: Cell) -> Mapping[str, Any] | None:
    for item in cells:
        if item.get("context") == cell.context and item.get("concurrency") == cell.concurrency:
            return item
    return None
