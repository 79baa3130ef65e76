"""Counters, gauges and histograms of the simulated engine, exposed as sglang 0.5.23 exposes them.

Every metric family a default sglang 0.5.23 server registers (its scheduler and
tokenizer collectors, read from the wheel into ``sglang_reference.json``) is
declared with sglang's name, type and documentation. The families the
simulation models carry samples with sglang's label names (sorted, as
prometheus_client's multiprocess collector writes them; ``le`` last on bucket
samples; ``pid`` on gauges of multiprocess mode ``all``) and sglang's buckets:

- per finished request (tokenizer labels, as ``observe_one_finished_request``):
  ``prompt_tokens_total``, ``generation_tokens_total``, ``num_requests_total``,
  ``spec_verify_calls_total``, the ``e2e_request_latency_seconds``,
  ``request_time_per_output_token_seconds`` and token-count histograms;
  ``time_to_first_token_seconds`` at the first token; ``inter_token_latency_seconds``
  per chunk (the interval divided over the chunk's tokens, as sglang's
  ``observe_inter_token_latency``: ``_sum`` grows by the interval, the bucket count
  by the token count); ``num_aborted_requests_total`` per aborted request
- every decode log interval (scheduler labels): the running/queued request,
  throughput, token usage, cache hit rate and speculative gauges

The families it does not model are declared (HELP/TYPE) with no samples. All
times are the engine's own wall clock; the benchmark compares them with the
client's. ``sglang:sim_speed`` is the one SIMULATED addition.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import os

from repro_py.simengine import sglang_reference
from repro_py.simengine.sglang_reference import MetricFamily

STREAM_LABELS = ("false", "true")
SIM_SPEED_FAMILY = "sglang:sim_speed"


@dataclasses.dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = dataclasses.field(default_factory=list)  # per bucket, non-cumulative; last is +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float, count: int = 1, total: float | None = None) -> None:
        """``count`` observations of ``value``; ``_sum`` grows by ``total`` (default value x count)."""
        self.counts[bisect.bisect_left(self.buckets, value)] += count
        self.total += value * count if total is None else total

    @property
    def count(self) -> int:
        return sum(self.counts)


def _go_float(value: float) -> str:
    """prometheus_client's ``floatToGoString``."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, str]) -> str:
    return ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(pairs.items()))


@dataclasses.dataclass
class Metrics:
    model_name: str
    speed: float
    spec_enabled: bool
    # tokenizer-side counters, per is_streaming label ("false"/"true")
    prompt_tokens: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(STREAM_LABELS, 0))
    generation_tokens: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(STREAM_LABELS, 0))
    num_requests: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(STREAM_LABELS, 0))
    spec_verify_calls: int = 0
    num_aborted_requests: int = 0
    histograms: dict[tuple[str, str], Histogram] = dataclasses.field(default_factory=dict)
    # scheduler-side lifetime totals (internal_states avg_spec_accept_length)
    spec_total_accept_tokens: int = 0
    spec_total_forward_ct: int = 0
    # gauges, updated every decode log interval
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    gen_throughput: float = 0.0
    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    token_usage: float = 0.0
    num_used_tokens: int = 0
    cache_hit_rate: float = 0.0  # the simulation has no prefix cache: nothing is ever a hit

    def _hist(self, name: str, streaming: str = "") -> Histogram:
        key = (name, streaming)
        hist = self.histograms.get(key)
        if hist is None:
            family = _family(name)
            hist = Histogram(family.buckets or ())
            self.histograms[key] = hist
        return hist

    # ---- tokenizer-side observations --------------------------------------------------

    def observe_first_token(self, ttft_s: float, *, streaming: bool) -> None:
        self._hist("sglang:time_to_first_token_seconds", _stream(streaming)).observe(ttft_s)

    def observe_chunk(self, interval_s: float, new_tokens: int) -> None:
        if new_tokens > 0:
            self._hist("sglang:inter_token_latency_seconds").observe(
                interval_s / new_tokens, count=new_tokens, total=interval_s
            )

    def observe_finished(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        verify_ct: int,
        streaming: bool,
        e2e_s: float | None = None,
        decode_s: float | None = None,
    ) -> None:
        label = _stream(streaming)
        self.prompt_tokens[label] += prompt_tokens
        self.generation_tokens[label] += completion_tokens
        self.num_requests[label] += 1
        if verify_ct > 0:
            self.spec_verify_calls += verify_ct
        if e2e_s is not None:
            self._hist("sglang:e2e_request_latency_seconds", label).observe(e2e_s)
        if decode_s is not None and completion_tokens > 1:
            self._hist("sglang:request_time_per_output_token_seconds", label).observe(
                decode_s / (completion_tokens - 1)
            )
        self._hist("sglang:prompt_tokens_histogram").observe(prompt_tokens)
        self._hist("sglang:uncached_prompt_tokens_histogram").observe(prompt_tokens)
        self._hist("sglang:generation_tokens_histogram").observe(completion_tokens)

    def observe_aborted(self) -> None:
        self.num_aborted_requests += 1

    def avg_spec_accept_length(self) -> float | None:
        if not self.spec_enabled or self.spec_total_forward_ct <= 0:
            return None
        return self.spec_total_accept_tokens / self.spec_total_forward_ct

    # ---- exposition -------------------------------------------------------------------

    def _gauges(self) -> dict[str, float]:
        out = {
            "sglang:num_running_reqs": float(self.num_running_reqs),
            "sglang:num_queue_reqs": float(self.num_queue_reqs),
            "sglang:gen_throughput": self.gen_throughput,
            "sglang:token_usage": self.token_usage,
            "sglang:num_used_tokens": float(self.num_used_tokens),
            "sglang:cache_hit_rate": self.cache_hit_rate,
        }
        if self.spec_enabled:
            out["sglang:spec_accept_length"] = self.spec_accept_length
            out["sglang:spec_accept_rate"] = self.spec_accept_rate
        return out

    def _counters(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, table in (
            ("sglang:prompt_tokens_total", self.prompt_tokens),
            ("sglang:generation_tokens_total", self.generation_tokens),
            ("sglang:num_requests_total", self.num_requests),
        ):
            out[name] = [({"is_streaming": k}, float(v)) for k, v in sorted(table.items())]
        out["sglang:num_aborted_requests_total"] = [({}, float(self.num_aborted_requests))]
        if self.spec_enabled:
            out["sglang:spec_verify_calls_total"] = [({}, float(self.spec_verify_calls))]
        return out

    def prometheus_text(self) -> str:
        """The ``/metrics`` body (Prometheus text format 0.0.4, as prometheus_client writes it)."""
        base = {
            "scheduler": {"model_name": self.model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                          "moe_ep_rank": "0"},
            "tokenizer": {"model_name": self.model_name, "engine_type": "unified"},
        }
        for collector in base:  # keep the label set sglang's source passes (checked against the wheel)
            expected = sglang_reference.base_labels(collector)
            base[collector] = {k: base[collector][k] for k in expected}
        gauges = self._gauges()
        counters = self._counters()
        pid = str(os.getpid())
        lines = [
            "# SIMULATED engine (repro_py.simengine): these figures come from a performance model "
            f"run at sim speed {self.speed:g}, not from a GPU.",
        ]
        for family in sglang_reference.registered_families():
            labels = base[family.collector]
            lines.append(f"# HELP {family.name} {_doc(family.documentation)}")
            lines.append(f"# TYPE {family.name} {family.type}")
            if family.type == "gauge" and family.name in gauges:
                extra = {"pid": pid} if family.pid_label else {}
                lines.append(f"{family.name}{{{_labels({**labels, **extra})}}} {_go_float(gauges[family.name])}")
            elif family.type == "counter" and family.name in counters:
                for extra, value in counters[family.name]:
                    lines.append(f"{family.name}{{{_labels({**labels, **extra})}}} {_go_float(value)}")
            elif family.type == "histogram":
                for (name, streaming), hist in sorted(self.histograms.items()):
                    if name == family.name:
                        extra = {"is_streaming": streaming} if streaming else {}
                        lines += _histogram_lines(family, {**labels, **extra}, hist)
        lines.append(f"# HELP {SIM_SPEED_FAMILY} SIMULATED engine: time compression factor of the performance model.")
        lines.append(f"# TYPE {SIM_SPEED_FAMILY} gauge")
        lines.append(f"{SIM_SPEED_FAMILY}{{{_labels(base['scheduler'])}}} {_go_float(self.speed)}")
        return "\n".join(lines) + "\n"


def _stream(streaming: bool) -> str:
    return "true" if streaming else "false"


def _doc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _family(name: str) -> MetricFamily:
    for family in sglang_reference.metric_families():
        if family.name == name:
            return family
    raise KeyError(f"{name} is not a metric family of sglang 0.5.23")


def _histogram_lines(family: MetricFamily, labels: dict[str, str], hist: Histogram) -> list[str]:
    lines: list[str] = []
    cumulative = 0
    for bound, count in zip((*hist.buckets, math.inf), hist.counts, strict=True):
        cumulative += count
        lines.append(f"{family.name}_bucket{{{_labels(labels)},le=\"{_go_float(bound)}\"}} {_go_float(cumulative)}")
    lines.append(f"{family.name}_count{{{_labels(labels)}}} {_go_float(cumulative)}")
    lines.append(f"{family.name}_sum{{{_labels(labels)}}} {_go_float(hist.total)}")
    return lines
