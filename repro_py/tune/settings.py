"""The settings of one tuning run: stored in ``tune/settings.json`` and reused by ``--resume``."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from repro_py import sampling_settings
from repro_py.sampling_settings import Sampling
from repro_py.sweep.fleetoffsets import DEFAULT_LIMIT
from repro_py.tune import objectives as objmod
from repro_py.tune.budget import Budget
from repro_py.tune.ladder import Rung
from repro_py.tune.noise import NoiseModel
from repro_py.tune.objectives import Cell, Objective, Slo
from repro_py.tune.search import SearchSettings
from repro_py.tune.space import Space, validated
from repro_py.tune.sweepio import PlanError, Target, format_duration, resume_mode


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    host: str
    objectives: tuple[Objective, ...]
    all_objectives: tuple[Objective, ...]
    slos: tuple[Slo, ...]
    ladder: tuple[Rung, ...]
    confidence: float
    floor_cv: float
    space: Space
    budget: Budget
    #: what every benchmark request sends (the space's configs carry it in their labels)
    sampling: Sampling = dataclasses.field(default_factory=Sampling)
    #: ``--lossless-restart``: where the lossless gate runs (``repro_py.sweep.lossless_restart``)
    lossless_restart: str = "separate"
    #: ``--host-offset-limit``: on several hosts, a host further than this from its class median is taken out
    host_offset_limit: float = DEFAULT_LIMIT

    def bench_cells(self) -> list[Cell]:
        cells = {o.cell for o in self.objectives}
        cells.update(objmod.slo_cells(self.slos, self.objectives, self.all_objectives))
        return sorted(cells)

    def search_settings(self) -> SearchSettings:
        return SearchSettings(
            objectives=self.objectives, ladder=self.ladder, slos=self.slos, all_objectives=self.all_objectives
        )

    def noise_model(self) -> NoiseModel:
        return NoiseModel(floor_cv=self.floor_cv, confidence=self.confidence)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "host": self.host,
            "objectives": [
                {"key": o.key, "title": o.title, "context": o.cell.context, "concurrency": o.cell.concurrency}
                for o in self.objectives
            ],
            "concurrency": next(o.cell.concurrency for o in self.all_objectives if o.key == "throughput"),
            "long_context": next(o.cell.context for o in self.all_objectives if o.key == "long-context"),
            "slos": [str(s) for s in self.slos],
            "ladder": [r.as_dict() for r in self.ladder],
            "noise": {"confidence": self.confidence, "floor_cv": self.floor_cv},
            "budget": self.budget.as_dict(),
            "space": self.space.as_dict(),
            "sampling": self.sampling.as_dict(),
            "lossless_restart": {"mode": self.lossless_restart},
            "host_offset_limit": self.host_offset_limit,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], target: Target, args: argparse.Namespace) -> TuneSettings:
        """The stored settings; on --resume only the budget may change (a larger one continues the search)."""
        names = [str(o["key"]) for o in doc.get("objectives") or []]
        given = [part.strip() for value in args.objective for part in value.split(",") if part.strip()]
        if given and given != names:
            raise PlanError(
                [
                    f"--resume: the run tunes {', '.join(names)}; --objective {', '.join(given)} differs "
                    "(start a new run for other objectives)"
                ]
            )
        stored_sampling = sampling_settings.of_result(doc)  # absent in runs from before the setting: greedy
        try:
            flagged = sampling_settings.parse(args.temperature, args.top_p)
        except sampling_settings.SamplingError as exc:
            raise PlanError([f"--temperature/--top-p: {p}" for p in exc.problems]) from exc
        if (args.temperature is not None or args.top_p is not None) and flagged != stored_sampling:
            raise PlanError([
                f"--resume: the run measures at {stored_sampling.text}; --temperature/--top-p give {flagged.text} "
                "(start a new run for another sampling setting)"
            ])  # fmt: skip
        concurrency, long_context = int(doc["concurrency"]), int(doc["long_context"])
        space_doc = doc.get("space") or {}
        raws = [dict(item["config"]) for item in space_doc.get("configs") or []]
        space = validated(
            target,
            raws,
            source=str(space_doc.get("source") or "stored space"),
            capped=int(space_doc.get("left_out_topk_above_budget") or 0),
        )
        stored_budget = doc.get("budget") or {}
        restore = bool(stored_budget.get("restore_reserved", True)) and not args.no_restore
        per_host = getattr(args, "max_restarts_per_host", None) or stored_budget.get("max_restarts_per_host")
        if args.max_restarts is not None or args.max_hours is not None:
            budget = Budget(max_restarts=args.max_restarts, max_hours=args.max_hours, restore=restore,
                            max_per_host=per_host)  # fmt: skip
        else:
            budget = Budget(
                max_restarts=stored_budget.get("max_restarts"),
                max_hours=stored_budget.get("max_hours"),
                restore=restore,
                max_per_host=per_host,
            )
        return cls(
            host=str(doc["host"]),
            objectives=objmod.make_objectives(names, concurrency=concurrency, long_context=long_context),
            all_objectives=objmod.make_objectives(
                list(objmod.OBJECTIVE_NAMES), concurrency=concurrency, long_context=long_context
            ),
            slos=tuple(objmod.parse_slo(s) for s in doc.get("slos") or []),
            ladder=tuple(Rung(str(r["name"]), int(r["max_tokens"]), int(r["repeats"])) for r in doc["ladder"]),
            confidence=float(doc["noise"]["confidence"]),
            floor_cv=float(doc["noise"]["floor_cv"]),
            space=space,
            budget=budget,
            sampling=stored_sampling,
            lossless_restart=resume_mode(
                getattr(args, "lossless_restart", None), doc, run=str(getattr(args, "run_id", None) or "being resumed")
            ),
            host_offset_limit=float(doc.get("host_offset_limit") or DEFAULT_LIMIT),
        )

    def summary_rows(self) -> list[tuple[str, str]]:
        budget = self.budget
        limit = (
            f"{budget.max_restarts} restarts (final restore and the lossless gates' own restarts included)"
            if budget.max_restarts is not None
            else f"{budget.max_hours:g} h"
        )
        return [
            ("objectives", "; ".join(f"{o.title} ({o.cell})" for o in self.objectives)),
            ("SLOs", ", ".join(str(s) for s in self.slos) or "none"),
            (
                "space",
                f"{len(self.space)} configs, validated ({self.space.source})"
                + (f"; {self.space.capped} with topk > budget left out" if self.space.capped else ""),
            ),
            ("ladder", " -> ".join(f"{r.name} {r.max_tokens} tok x {r.repeats}" for r in self.ladder) + " -> gates"),
            (
                "noise",
                f"{self.confidence:.0%} intervals; between restarts measured from the current config's restarts "
                f"(assumed {self.floor_cv:.1%} until then)",
            ),
            ("budget", limit + ("" if budget.max_per_host is None
                                else f"; at most {budget.max_per_host} on one host (its restore included)")),
            ("sampling", f"{self.sampling.text} in every benchmark request"),
        ]


def estimate_lines(settings: TuneSettings, estimate: Mapping[str, float]) -> list[str]:
    """The tuner's estimate next to the full grid's, from the sweep planner's per-config figures."""
    load = float(estimate.get("load_s_per_config", 0.0))
    cell_full = float(estimate.get("bench_s_per_cell", 0.0))
    gates = float(estimate.get("gates_s_per_config", 0.0))
    per = int(estimate.get("restarts_per_config", 1))  # 2: a gated config's lossless gate has a restart of its own
    full = settings.ladder[-1]
    cells = len(settings.bench_cells())

    def rung_cost(rung: Rung) -> float:
        return cell_full * cells * (rung.repeats * rung.max_tokens) / (full.repeats * full.max_tokens)

    dropped = load + rung_cost(settings.ladder[0])
    survivor = load * per + sum(rung_cost(r) for r in settings.ladder) + gates
    grid = (load * per + cell_full * cells + gates) * len(settings.space) + load
    gated = (f"{per} restarts: the production one, then its lossless gate's own" if per > 1 else "one restart")
    lines = [
        f"per config: ~{format_duration(dropped)} for a config dropped at the screen (one restart), "
        f"~{format_duration(survivor)} for one measured to the end and gated ({gated}; restart "
        f"~{format_duration(load)})",
    ]
    if settings.budget.max_restarts is not None:
        worst = survivor / per * (settings.budget.max_restarts - 1) + load
        lines.append(f"at most {settings.budget.max_restarts} restarts: at most ~{format_duration(worst)}")
    else:
        lines.append(f"at most {settings.budget.max_hours:g} h")
    lines.append(
        f"the full grid of this space (every config measured fully and gated, then the restore): "
        f"{per * len(settings.space) + 1} restarts, ~{format_duration(grid)}"
    )
    return lines
