"""The per-config result file ``configs/<label>.json`` (schema 1): its shape, how a new one starts,
and how one is read back (:func:`load_result`, which refuses a file off the schema by name and key).

The runner writes it; the report, the time estimates of later plans and the
tuner read it. docs/architecture.md, "Per-config result file", shows it whole.
"""

# no "from __future__ import annotations": TypedDict must see NotRequired to list the required keys

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast

from repro_py.results.failures import FAILURE_CLASSES

SCHEMA = 1
STATUSES = ("ok", "failed")

#: ``failure`` of a failed config (``class`` is one of :data:`FAILURE_CLASSES`).
Failure = TypedDict("Failure", {"class": str, "reason": str, "journal": list[str]})


class ConfigResult(TypedDict):
    schema: int
    run_id: str
    label: str
    #: the config in short keys (``sim_fault`` when set)
    config: dict[str, Any]
    #: the grid entry's own extra vars
    extra_vars: NotRequired[dict[str, Any]]
    #: what the benchmark sent with every request: temperature, top_p (absent in results written before
    #: the setting existed: those measured greedy decoding, temperature 0, top_p 1)
    sampling: NotRequired[dict[str, Any]]
    status: Literal["ok", "failed"]
    failure: Failure | None
    #: what a resume compares: unit, patch series, lock, engine kind, host, config digest
    fingerprint: dict[str, Any]
    #: ``/server_info`` of the engine that ran it: kind, version, sim_speed, max_total_num_tokens
    engine: dict[str, Any]
    #: the restart that gave the figures: time_to_ready_s, invocation_id, wall_s, changed, status, main_pid,
    #: server_info_echo (the new process's echo at readiness), artifacts, unit_sha256, deterministic_inference
    reconfigure: dict[str, Any]
    #: ``--lossless-restart`` of the run: ``separate`` or ``shared`` (absent in results written before it existed)
    lossless_restart: NotRequired[str]
    #: the lossless gate's own restart with deterministic inference (``separate``), as ``reconfigure``
    lossless_reconfigure: NotRequired[dict[str, Any]]
    #: ``repro_py.bench`` result: cells and settings
    bench: dict[str, Any]
    #: each gate's result and ``passed``
    gates: dict[str, Any]
    started_at: str
    finished_at: str | None
    wall_s: float
    #: seconds per stage: reconfigure_s, load_s, server_info_s, bench_s, gates_s; with the lossless gate's own
    #: restart also lossless_reconfigure_s, lossless_load_s, lossless_gate_s
    timing: NotRequired[dict[str, float]]
    #: a fleet sweep's or tuning run's: the host that measured it (name, class, offset, offset_uncertainty; a tuning
    #: run applies no offset and keeps the host's as ``offset_measured``)
    host: NotRequired[dict[str, Any]]
    #: the hardware class of the host that measured it, as ``playbooks/host_class.yml`` read it before the first
    #: restart (``key``, GPU model and count, driver, toolkit, sglang, series digest; a local simulated engine's
    #: class is ``local-simulated``)
    host_class: NotRequired[dict[str, Any]]
    #: on several hosts: the earlier measurements of it that did not count (host, cause, failure, at), in order
    attempts: NotRequired[list[dict[str, Any]]]


_NUMBER = (int, float)
#: every required key: the JSON types it may hold, and those types in words
REQUIRED_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "schema": ((int,), "an integer"),
    "run_id": ((str,), "a string"),
    "label": ((str,), "a string"),
    "config": ((dict,), "a mapping"),
    "status": ((str,), "a string"),
    "failure": ((dict, type(None)), "a mapping or null"),
    "fingerprint": ((dict,), "a mapping"),
    "engine": ((dict,), "a mapping"),
    "reconfigure": ((dict,), "a mapping"),
    "bench": ((dict,), "a mapping"),
    "gates": ((dict,), "a mapping"),
    "started_at": ((str,), "a string"),
    "finished_at": ((str, type(None)), "a string or null"),
    "wall_s": (_NUMBER, "a number"),
}
_OPTIONAL_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "extra_vars": ((dict,), "a mapping"),
    "sampling": ((dict,), "a mapping"),
    "timing": ((dict,), "a mapping"),
    "lossless_restart": ((str,), "a string"),
    "lossless_reconfigure": ((dict,), "a mapping"),
}


class ResultError(ValueError):
    """A result file that is not a schema-1 config result; names the file and the key."""

    def __init__(self, path: Path | str, key: str | None, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.key = key


def new_result(
    *, run_id: str, label: str, config: dict[str, Any], extra_vars: Mapping[str, Any], engine_kind: str,
    bench_settings: dict[str, Any], started_at: str, sampling: Mapping[str, Any] | None = None,
) -> ConfigResult:  # fmt: skip
    """The result of a config before anything ran: ``ok`` until a stage fails it."""
    return {
        "schema": SCHEMA,
        "run_id": run_id,
        "label": label,
        "config": config,
        "extra_vars": dict(extra_vars),
        "sampling": dict(sampling or {"temperature": 0.0, "top_p": 1.0}),
        "status": "ok",
        "failure": None,
        "fingerprint": {},
        "engine": {"kind": engine_kind, "version": None, "sim_speed": None, "max_total_num_tokens": None},
        "reconfigure": {"time_to_ready_s": None, "invocation_id": None, "wall_s": 0.0, "changed": False},
        "bench": {"cells": [], "settings": bench_settings},
        "gates": {"passed": False},
        "started_at": started_at,
        "finished_at": None,
        "wall_s": 0.0,
        "timing": {},
    }


def mark_failed(result: ConfigResult, klass: str, reason: str, journal: list[str] | None = None) -> ConfigResult:
    """``result`` as failed with ``klass`` (one of :data:`FAILURE_CLASSES`) and its reason."""
    result["status"] = "failed"
    result["failure"] = {"class": klass, "reason": reason or "(no reason given)", "journal": list(journal or [])}
    return result


def _is(value: object, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def check_result(doc: object, where: Path | str) -> ConfigResult:
    """``doc`` as a :class:`ConfigResult`, or :class:`ResultError` naming ``where`` and the bad key."""
    if not isinstance(doc, dict):
        raise ResultError(where, None, f"expected a JSON object (a config result), got {type(doc).__name__}")
    if "schema" in doc and doc["schema"] != SCHEMA:
        raise ResultError(where, "schema", f"'schema' is {doc['schema']!r}; this version reads schema {SCHEMA}")
    for key, (types, words) in REQUIRED_KEYS.items():
        if key not in doc:
            raise ResultError(where, key, f"the required key '{key}' is missing (schema {SCHEMA})")
        if not _is(doc[key], types):
            raise ResultError(where, key, f"'{key}' is {doc[key]!r}; expected {words}")
    for key, (types, words) in _OPTIONAL_KEYS.items():
        if key in doc and not _is(doc[key], types):
            raise ResultError(where, key, f"'{key}' is {doc[key]!r}; expected {words}")
    if doc["status"] not in STATUSES:
        raise ResultError(where, "status", f"'status' is {doc['status']!r}; allowed: {', '.join(STATUSES)}")
    failure = doc["failure"]
    if doc["status"] == "failed":
        if failure is None:
            raise ResultError(where, "failure", "status 'failed' needs a 'failure' with its class and reason")
        if failure.get("class") not in FAILURE_CLASSES:
            raise ResultError(
                where, "failure",
                f"'failure.class' is {failure.get('class')!r}; allowed: {', '.join(FAILURE_CLASSES)}",
            )  # fmt: skip
        if not isinstance(failure.get("reason"), str):
            raise ResultError(where, "failure", f"'failure.reason' is {failure.get('reason')!r}; expected a string")
    return cast(ConfigResult, doc)


def load_result(path: Path) -> ConfigResult:
    """Read ``configs/<label>.json``; :class:`ResultError` names the file and the missing or bad key."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultError(path, None, f"cannot be read: {exc}") from exc
    except ValueError as exc:
        raise ResultError(path, None, f"not a JSON document: {exc}") from exc
    return check_result(doc, path)
