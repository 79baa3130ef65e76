"""Counters of the simulated engine and their Prometheus text (sglang 0.5.23 names and labels).

Counters move when a request finishes, as sglang's tokenizer-side collector
does (``observe_one_finished_request``), so a before/after delta over a
benchmark cell is exact.
"""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass
class Metrics:
    model_name: str
    speed: float
    spec_enabled: bool
    # per is_streaming label ("true"/"false")
    prompt_tokens: dict[str, int] = dataclasses.field(default_factory=lambda: {"false": 0, "true": 0})
    generation_tokens: dict[str, int] = dataclasses.field(default_factory=lambda: {"false": 0, "true": 0})
    num_requests: dict[str, int] = dataclasses.field(default_factory=lambda: {"false": 0, "true": 0})
    spec_verify_calls: int = 0
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
    created: float = dataclasses.field(default_factory=time.time)

    def observe_finished(self, *, prompt_tokens: int, completion_tokens: int, verify_ct: int, streaming: bool) -> None:
        label = "true" if streaming else "false"
        self.prompt_tokens[label] += prompt_tokens
        self.generation_tokens[label] += completion_tokens
        self.num_requests[label] += 1
        if verify_ct > 0:
            self.spec_verify_calls += verify_ct

    def avg_spec_accept_length(self) -> float | None:
        if not self.spec_enabled or self.spec_total_forward_ct <= 0:
            return None
        return self.spec_total_accept_tokens / self.spec_total_forward_ct

    def prometheus_text(self) -> str:
        tok = f'engine_type="unified",model_name="{_esc(self.model_name)}"'
        sched = f'engine_type="unified",model_name="{_esc(self.model_name)}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
        lines = [
            "# SIMULATED engine (repro_py.simengine): these figures come from a performance model "
            f"run at sim speed {self.speed:g}, not from a GPU.",
        ]

        def counter(name: str, doc: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} counter")
            for labels, value in samples:
                lines.append(f"{name}{{{labels}}} {float(value)}")
                created = name[: -len("_total")] + "_created"
                lines.append(f"{created}{{{labels}}} {self.created}")

        def gauge(name: str, doc: str, value: float) -> None:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} gauge")
            lines.append(f"{name}{{{sched}}} {float(value)}")

        for name, doc, table in (
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_tokens),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.", self.generation_tokens),
            ("sglang:num_requests_total", "Number of requests processed.", self.num_requests),
        ):
            counter(name, doc, [(f'{tok},is_streaming="{k}"', v) for k, v in sorted(table.items())])
        counter(
            "sglang:spec_verify_calls_total",
            "Number of speculative decoding verification calls.",
            [(tok, self.spec_verify_calls)],
        )
        gauge("sglang:num_running_reqs", "The number of running requests.", self.num_running_reqs)
        gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", self.num_queue_reqs)
        gauge("sglang:gen_throughput", "The generation throughput (token/s).", self.gen_throughput)
        gauge("sglang:token_usage", "The token usage.", self.token_usage)
        gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            self.spec_accept_length,
        )
        gauge(
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            self.spec_accept_rate,
        )
        gauge("sglang:sim_speed", "SIMULATED engine: time compression factor of the performance model.", self.speed)
        return "\n".join(lines) + "\n"


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
