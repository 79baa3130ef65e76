"""Run directory layout and resume state.

``results/<run-id>/``::

    plan.json                  the plan (configs, bench settings, estimate, SIMULATED flag)
    state.json                 running | interrupted | complete, with timestamps
    configs/<label>.json       one result per finished config (schema 1, atomic)
    lossless-reference.json    the outputs every later config must reproduce
    sampled-reference.json     the baseline's samples every later config's distribution is compared with
    partial/<label>.json       a config between its two restarts (``configrun``): --resume runs only the second
    runner/<label>/            ansible-runner private data dir (artifacts, events)
    runner/<label>.lossless-gate/  the same for the lossless gate's own restart (deterministic inference)
    runner/restore-default/    the final restore of the inventory's default config
    summary.md summary.csv plots/*.png MANIFEST.sha256

A config is *done* when ``configs/<label>.json`` exists, loads on the result
schema (:mod:`repro_py.results.schema`), and its fingerprint matches
the current one on :data:`fingerprint.RESUME_KEYS`.
A config interrupted mid-way has no result file, so ``--resume`` reruns it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from repro_py.atomicio import write_json_atomic
from repro_py.results.schema import ConfigResult, ResultError, load_result
from repro_py.sweep import fingerprint

STATE_RUNNING = "running"
STATE_INTERRUPTED = "interrupted"
STATE_COMPLETE = "complete"
NO_RESULT = "no result yet"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def plan(self) -> Path:
        return self.path / "plan.json"

    @property
    def state(self) -> Path:
        return self.path / "state.json"

    @property
    def configs(self) -> Path:
        return self.path / "configs"

    @property
    def lossless_reference(self) -> Path:
        return self.path / "lossless-reference.json"

    @property
    def sampled_reference(self) -> Path:
        return self.path / "sampled-reference.json"

    def result(self, label: str) -> Path:
        return self.configs / f"{label}.json"

    def runner_dir(self, label: str) -> Path:
        return self.path / "runner" / label

    def gate_runner_dir(self, label: str) -> Path:
        """The private data dir of the lossless gate's own restart (``--lossless-restart separate``)."""
        return self.path / "runner" / f"{label}.lossless-gate"

    def partial(self, label: str) -> Path:
        """A config's result after the first of its two stages (not a result: ``configs/`` never holds it)."""
        return self.path / "partial" / f"{label}.json"

    def partial_labels(self) -> list[str]:
        """The configs between their two stages: a partial result and no result yet."""
        folder = self.path / "partial"
        found = sorted(path.stem for path in folder.glob("*.json")) if folder.is_dir() else []
        return [label for label in found if not self.result(label).is_file()]

    def read_state(self) -> dict[str, Any]:
        try:
            doc = json.loads(self.state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def write_state(self, status: str, **extra: object) -> None:
        doc = self.read_state()
        doc.setdefault("run_id", self.run_id)
        doc.setdefault("started_at", now_iso())
        doc.update(extra)
        doc["status"] = status
        doc["updated_at"] = now_iso()
        history = list(doc.get("history") or [])
        history.append({"status": status, "at": doc["updated_at"]})
        doc["history"] = history[-50:]
        write_json_atomic(self.state, doc)

    def read_result(self, label: str) -> ConfigResult | None:
        """``label``'s result; None when there is none or it is off the schema (then it runs again)."""
        try:
            return load_result(self.result(label))
        except ResultError:
            return None

    def results(self) -> list[ConfigResult]:
        """Every result on the schema (a file off it is no result: a resume runs its config again)."""
        out: list[ConfigResult] = []
        if not self.configs.is_dir():
            return out
        for path in sorted(self.configs.glob("*.json")):
            try:
                out.append(load_result(path))
            except ResultError:
                continue
        return out


@dataclasses.dataclass(frozen=True)
class HostRunDir(RunDir):
    """A class's run directory as one host of a fleet writes into it: the results are the class's, the
    ansible-runner directories the host's own (``runner/<host>/<label>/``), so a config measured again on another
    host keeps both attempts' artifacts."""

    host: str = ""

    def runner_dir(self, label: str) -> Path:
        return self.path / "runner" / self.host / label

    def gate_runner_dir(self, label: str) -> Path:
        return self.path / "runner" / self.host / f"{label}.lossless-gate"


@dataclasses.dataclass(frozen=True)
class Decision:
    run: bool
    reason: str


def decide(run_dir: RunDir, label: str, current: Mapping[str, str], *, retry_failed: bool = False) -> Decision:
    """Whether ``--resume`` must (re)run ``label``, and why."""
    doc = run_dir.read_result(label)
    if doc is None:
        return Decision(True, NO_RESULT)
    ok, differ = fingerprint.matches(doc.get("fingerprint"), current)
    if not ok:
        return Decision(True, "fingerprint changed: " + ", ".join(differ))
    if retry_failed and doc.get("status") != "ok":
        return Decision(True, "failed before; --retry-failed")
    return Decision(False, f"done ({doc.get('status')}), fingerprint matches")


def latest_resumable(results_root: Path, *, where: Callable[[Path], bool] | None = None) -> Path | None:
    """The most recently updated run directory that did not complete (and that ``where`` accepts, if given)."""
    best: tuple[str, Path] | None = None
    if not results_root.is_dir():
        return None
    for child in results_root.iterdir():
        run = RunDir(child)
        if not (run.plan.is_file() or run.state.is_file()) or (where is not None and not where(child)):
            continue
        doc = run.read_state()
        if doc.get("status") == STATE_COMPLETE:
            continue
        stamp = str(doc.get("updated_at") or "")
        if best is None or stamp > best[0]:
            best = (stamp, child)
    return None if best is None else best[1]
