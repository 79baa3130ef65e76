"""What sglang 0.5.23 reports, read from ``sglang_reference.json`` (generated from the wheel by ``refgen``).

The engine takes its ``/server_info`` keys, its metric families (names, types,
documentation, label names, buckets) and its request-validation expectations
from this file, and the tests check the engine against it; with the CPU sglang
venv present, ``tests/simengine/test_sglang_reference.py`` also checks that the
file still matches the wheel.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("sglang_reference.json")

# Keys the simulated engine adds to /server_info (documented in docs/simengine.md).
SIMULATED_SERVER_INFO_KEYS: tuple[str, ...] = ("simulated", "sim")


@dataclasses.dataclass(frozen=True)
class MetricFamily:
    name: str
    type: str  # counter | gauge | histogram | summary (as exposed)
    kind: str  # the sglang constructor: Counter, Gauge, Histogram, Summary, GaugeHistogram
    collector: str  # scheduler | tokenizer
    documentation: str
    extra_labels: tuple[str, ...]
    buckets: tuple[float, ...] | None
    multiprocess_mode: str | None
    condition: str | None  # registered only when this holds (e.g. ``self.enable_lora``)

    @property
    def pid_label(self) -> bool:
        """prometheus_client's multiprocess mode adds a ``pid`` label to gauges in mode ``all`` (the default)."""
        return self.type == "gauge" and self.multiprocess_mode in (None, "all", "liveall")


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def server_args_fields() -> list[str]:
    return list(load()["server_args"]["fields"])


def server_args_defaults() -> dict[str, Any]:
    return dict(load()["server_args"]["defaults"])


def server_info_keys() -> list[str]:
    """Every key sglang's ``/server_info`` has: resolved ServerArgs fields plus the route's own keys."""
    return [*server_args_fields(), *load()["server_info_keys"]]


def base_labels(collector: str) -> tuple[str, ...]:
    return tuple(load()["metric_labels"][collector])


@functools.lru_cache(maxsize=1)
def metric_families() -> tuple[MetricFamily, ...]:
    out: list[MetricFamily] = []
    for item in load()["metrics"]:
        buckets = item.get("buckets")
        out.append(MetricFamily(
            name=str(item["name"]),
            type=str(item["type"]),
            kind=str(item["kind"]),
            collector=str(item["collector"]),
            documentation=str(item.get("documentation") or ""),
            extra_labels=tuple(item.get("extra_labels") or ()),
            buckets=tuple(float(b) for b in buckets) if buckets is not None else None,
            multiprocess_mode=item.get("multiprocess_mode"),
            condition=item.get("condition"),
        ))
    return tuple(out)


def registered_families() -> tuple[MetricFamily, ...]:
    """The families a default server registers (those behind a feature flag left out)."""
    return tuple(f for f in metric_families() if f.condition is None)


def request_fields(path: str) -> list[str]:
    """Field order of sglang's pydantic request model for ``path`` (validation errors follow it)."""
    return list(load()["protocol"]["request_fields"][path])


def nullable_fields(path: str) -> frozenset[str]:
    """Fields of the request model that accept ``null``."""
    return frozenset(load()["protocol"]["request_nullable"][path])


def union_tags(name: str) -> list[str]:
    """pydantic's tags for the members of a union field, in the order it reports their errors
    (``message``, ``content``, ``<path>.stop``, ``/v1/completions.prompt``, ``/generate.text`` ...)."""
    return list(load()["protocol"]["unions"][name])


def generic_roles() -> tuple[str, ...]:
    """The roles of sglang's ChatCompletionMessageGenericParam (every role but ``user``)."""
    return tuple(load()["protocol"]["generic_roles"])


def media_part_types() -> tuple[str, ...]:
    """The content-part types sglang's serving layer refuses for a text-only model (``_MEDIA_CONTENT_PART_TYPES``)."""
    return tuple(load()["protocol"]["media_part_types"])


def http_server_file() -> str:
    """sglang's ``http_server.py``, relative to site-packages."""
    return str(load()["protocol"]["http_server"])


def endpoint(path: str) -> dict[str, Any]:
    """The route function FastAPI names in a validation message for ``path``: ``function`` and ``line``."""
    return dict(load()["protocol"]["endpoints"][path])


def contract() -> dict[str, Any]:
    """The ``/generate`` API contract's decoders (``sglang/api/v1/api_types.py``): ``[key, expression]`` lists."""
    return dict(load()["protocol"]["contract"])


def request_cases() -> list[dict[str, Any]]:
    """Every request body of ``refgen_cases`` with sglang's verdict on it (``expect``: status, body)."""
    return list(load()["protocol"]["cases"])


def parity_model() -> dict[str, int]:
    """The simulated model the verdicts were taken for (vocabulary size, context length)."""
    return dict(load()["protocol"]["parity_model"])
