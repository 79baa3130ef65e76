"""The search space of a tuning run: every config the tuner may restart the engine with.

Sources, the first present wins: ``--space FILE``; the inventory group var
``tune_space``; the built-in ``default_space.yaml``. The format is the sweep
grid's, with ``grid`` allowed to be a list of products::

    configs:                       # explicit configs (short keys), each must be valid
      - {algorithm: none}
    grid:                          # one cartesian product, or a list of them
      - {algorithm: [ddtree], budget: [4, 8, 16], topk: [1, 2, 4, 8], block_size: [8], window: [2048]}
      - {algorithm: [dflash], block_size: [8, 16], window: [2048]}

In a product, combinations with ``topk > budget`` are left out and counted
(the top-K cap is at most the budget by rule, so a product over both axes
naturally crosses it); duplicates are refused, as in a sweep grid; every other config is validated with the sweep's
planner (``repro_py.spec_config`` rules, the inventory's drafter block size
and mismatch setting, ``sim_fault`` only for a simulated engine) before
anything restarts: one invalid config refuses the space, naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from repro_py import spec_config
from repro_py.tune.sweepio import PlanError, PlannedConfig, Target, expand_grid, validate_all

DEFAULT_SPACE_FILE = Path(__file__).with_name("default_space.yaml")
SPACE_VAR = "tune_space"


@dataclasses.dataclass(frozen=True)
class Space:
    configs: tuple[PlannedConfig, ...]
    raws: tuple[dict[str, object], ...]
    source: str
    capped: int  # product combinations left out because topk > budget

    def __len__(self) -> int:
        return len(self.configs)

    def by_label(self) -> dict[str, PlannedConfig]:
        return {c.label: c for c in self.configs}

    def including(self, cfg: PlannedConfig) -> Space:
        """This space with ``cfg`` added (the inventory's current config, which every run measures)."""
        if cfg.label in self.by_label():
            return self
        return dataclasses.replace(
            self,
            configs=(*self.configs, cfg),
            raws=(*self.raws, cfg.short()),
            source=f"{self.source}, plus the inventory's current config {cfg.label}",
        )

    def neighbours(self, cfg: PlannedConfig) -> list[PlannedConfig]:
        """Configs of the space one step away: the same algorithm and settings but one, which is the next value
        up or down among those the space has (a full draft cache counts as the longest window)."""
        base = cfg.short()
        out: list[PlannedConfig] = []
        for key in _steps(cfg.spec.algorithm):
            rest = {k: v for k, v in base.items() if k != key}
            same = [c for c in self.configs if {k: v for k, v in c.short().items() if k != key} == rest and c != cfg]
            order = sorted([*same, cfg], key=lambda c: _rank(c.short().get(key)))
            at = order.index(cfg)
            out += [order[i] for i in (at - 1, at + 1) if 0 <= i < len(order)]
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "size": len(self.configs),
            "left_out_topk_above_budget": self.capped,
            "configs": [{"label": c.label, "config": c.short()} for c in self.configs],
        }


def _steps(algorithm: str) -> list[str]:
    """The settings a neighbour of an ``algorithm`` config steps in: the ones it uses (the window last, its full
    draft cache included)."""
    settings = [key for key in spec_config.keys_of(algorithm) if key != "algorithm"]
    return sorted(settings, key=lambda key: key == "window")


def _rank(value: object) -> float:
    return float("inf") if value is None else float(value)  # type: ignore[arg-type]


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _over_cap(raw: Mapping[str, object]) -> bool:
    budget, topk = _int_or_none(raw.get("budget")), _int_or_none(raw.get("topk"))
    return budget is not None and topk is not None and topk > budget


def expand_space(spec: object, *, where: str) -> tuple[list[dict[str, object]], int]:
    """Raw configs of a space document and how many product combinations the topk cap left out."""
    if not isinstance(spec, Mapping):
        raise PlanError([f"{where}: expected a mapping with configs: and/or grid:, got {type(spec).__name__}"])
    unknown = sorted(set(map(str, spec)) - {"configs", "grid"})
    if unknown:
        raise PlanError([f"{where}: unknown top-level key(s) {', '.join(unknown)}; allowed: configs, grid"])
    raws = expand_grid({"configs": spec.get("configs") or []}, where=where) if spec.get("configs") else []
    grids = spec.get("grid")
    products: list[object] = list(grids) if isinstance(grids, list) else ([grids] if grids is not None else [])
    capped = 0
    for index, product in enumerate(products):
        for raw in expand_grid({"grid": product}, where=f"{where}: grid[{index}]"):
            if _over_cap(raw):
                capped += 1
            else:
                raws.append(raw)
    if not raws:
        raise PlanError([f"{where}: the space is empty"])
    return raws, capped


def load_space(target: Target, path: Path | None = None) -> Space:
    """The space for ``target``: ``path``, else the inventory's ``tune_space``, else the built-in default."""
    spec: Any
    if path is not None:
        try:
            spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise PlanError([f"--space {path}: {exc}"]) from exc
        where = str(path)
    elif target.var(SPACE_VAR) is not None:
        spec, where = target.var(SPACE_VAR), f"{target.inventory}: {SPACE_VAR}"
    else:
        spec = yaml.safe_load(DEFAULT_SPACE_FILE.read_text(encoding="utf-8"))
        where = "built-in default space"
    raws, capped = expand_space(spec, where=where)
    return validated(target, raws, source=where, capped=capped)


def validated(target: Target, raws: list[dict[str, object]], *, source: str, capped: int = 0) -> Space:
    """Validate ``raws`` for ``target`` with the sweep's planner (every invalid config named)."""
    drafter = _int_or_none(target.var("sweep_drafter_block_size"))
    configs = validate_all(
        raws,
        simulated=target.simulated,
        drafter_block_size=drafter,
        allow_block_mismatch=target.var("sglang_service_allow_block_mismatch") is True,
    )
    return Space(configs=tuple(configs), raws=tuple(c.short() for c in configs), source=source, capped=capped)
