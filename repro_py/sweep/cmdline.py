"""What a run's settings come from besides the grid: the command line, the inventory's ``sweep_bench`` and a
resumed run's ``plan.json`` (run id, extra vars, benchmark plan, sampling). The tuner reads them the same way."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

from repro_py import sampling_settings
from repro_py.sampling_settings import Sampling
from repro_py.sweep import extravars, state
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.errors import PlanError
from repro_py.sweep.inventory import Target

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def ints(values: Sequence[str] | None, flag: str) -> tuple[int, ...] | None:
    if not values:
        return None
    out: list[int] = []
    for value in values:
        for piece in str(value).split(","):
            part = piece.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) < 1:
                raise PlanError([f"{flag} {part!r}: positive integers expected"])
            out.append(int(part))
    return tuple(out)


def parse_extra_vars(items: Sequence[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise PlanError([f"--extra-var {item!r}: KEY=VALUE expected"])
        why = extravars.problem(key, "--extra-var")
        if why is not None:
            raise PlanError([why])
        try:
            out[key] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise PlanError([f"--extra-var {item!r}: {exc}"]) from exc
    return out


def stored_plan(run_dir: state.RunDir) -> dict[str, Any] | None:
    try:
        doc = json.loads(run_dir.plan.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _inventory_bench(target: Target) -> BenchPlan:
    """The inventory's ``sweep_bench`` (contexts, concurrency, repeats, max_tokens), over the defaults."""
    spec = target.var("sweep_bench")
    if spec is None:
        return BenchPlan()
    where = f"{target.inventory}: sweep_bench"
    if not isinstance(spec, dict) or set(spec) - {"contexts", "concurrency", "repeats", "max_tokens"}:
        raise PlanError([f"{where} must be a mapping of contexts, concurrency, repeats, max_tokens; got {spec!r}"])
    base = BenchPlan()
    try:
        contexts = ints([str(v) for v in spec.get("contexts", [])], where + ".contexts") or base.contexts
        concurrency = ints([str(v) for v in spec.get("concurrency", [])], where + ".concurrency") or base.concurrency
        repeats, max_tokens = int(spec.get("repeats", base.repeats)), int(spec.get("max_tokens", base.max_tokens))
    except (TypeError, ValueError) as exc:
        raise PlanError([f"{where}: {exc}"]) from exc
    return BenchPlan(contexts=contexts, concurrency=concurrency, repeats=repeats, max_tokens=max_tokens)


def bench_plan(args: argparse.Namespace, stored: dict[str, Any] | None, target: Target) -> BenchPlan:
    base = _inventory_bench(target)
    if stored and isinstance(stored.get("bench"), dict):
        b = stored["bench"]
        base = BenchPlan(
            contexts=tuple(b.get("contexts") or base.contexts),
            concurrency=tuple(b.get("concurrency") or base.concurrency),
            repeats=int(b.get("repeats") or base.repeats),
            max_tokens=int(b.get("max_tokens") or base.max_tokens),
        )
    contexts = ints(args.bench_contexts, "--bench-contexts") or base.contexts
    concurrency = ints(args.bench_concurrency, "--bench-concurrency") or base.concurrency
    repeats = base.repeats if args.repeats is None else args.repeats
    max_tokens = base.max_tokens if args.max_tokens is None else args.max_tokens
    if repeats < 1 or max_tokens < 1:
        raise PlanError(["--repeats and --max-tokens must be >= 1"])
    return BenchPlan(contexts=contexts, concurrency=concurrency, repeats=repeats, max_tokens=max_tokens)


def run_sampling(args: argparse.Namespace, stored: dict[str, Any] | None) -> Sampling:
    """The run's sampling setting: the flags, else the resumed run's, else greedy. A resumed run keeps its
    setting: other flags would relabel its configs and leave its results beside others (a new run for that)."""
    try:
        given = sampling_settings.parse(args.temperature, args.top_p)
    except sampling_settings.SamplingError as exc:
        raise PlanError([f"--temperature/--top-p: {p}" for p in exc.problems]) from exc
    if stored is None:
        return given
    recorded = sampling_settings.of_result(stored)  # plan.json carries "sampling" as a result does
    flags = args.temperature is not None or args.top_p is not None
    if flags and given != recorded:
        raise PlanError([
            f"--resume: run {stored.get('run_id')} measures at {recorded.text}; --temperature/--top-p give "
            f"{given.text} (start a new run for another sampling setting)"
        ])  # fmt: skip
    return recorded


def default_run_id(target: Target) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    host = re.sub(r"[^A-Za-z0-9._-]", "-", target.host)
    return f"{stamp}-{host}"
