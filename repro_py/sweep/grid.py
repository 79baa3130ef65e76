"""The sweep's grid: its sources, expansion, and the validation of every config.

Sources of the grid, in order of precedence:

1. ``--grid FILE``: YAML with ``configs:`` (an explicit list of configs in
   short keys) and/or ``grid:`` (a mapping of short key -> list of values,
   expanded as a cartesian product); both may be present (explicit first).
2. the inventory group var ``sweep_grid`` (same shapes: a list of configs,
   or a mapping with ``configs``/``grid``).

Every config is validated with :func:`repro_py.spec_config.validate` (the
rules the roles' preflight uses) before anything runs; one invalid config
refuses the whole plan, each invalid config listed with its message.
``sim_fault`` (fault injection) is accepted only when the inventory's
engine is the simulated one.

``temperature`` and ``top_p`` (:mod:`repro_py.sampling_settings`) are the
sampling settings the benchmark sends with every request of that entry; an
entry without them takes the run's (``--temperature``/``--top-p``, default
greedy). They are measurement settings, not engine settings: never passed to
the play (the restart is the same), but part of the label and config digest
when not the default.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from repro_py import sampling_settings, spec_config
from repro_py.simengine.faults import FaultError, parse_faults
from repro_py.spec_config import SpecConfig, SpecConfigError
from repro_py.sweep import extravars
from repro_py.sweep.errors import PlanError
from repro_py.sweep.inventory import Target

SIM_FAULT_KEY = extravars.SIM_FAULT_KEY


@dataclasses.dataclass(frozen=True)
class PlannedConfig:
    """One validated config: the spec settings plus an optional simulated fault."""

    spec: SpecConfig
    sim_fault: str | None = None
    #: the grid entry's own extra vars: passed to this config's play only; not part of the label
    extra_vars: Mapping[str, object] = dataclasses.field(default_factory=dict, hash=False)
    #: what the benchmark sends with every request (not an engine setting: never in extravars())
    sampling: sampling_settings.Sampling = dataclasses.field(default_factory=sampling_settings.Sampling)

    @property
    def label(self) -> str:
        return spec_config.run_label(self.spec, self.sim_fault) + self.sampling.label_suffix

    def short(self) -> dict[str, object]:
        """The config in short keys (as in results and extra vars; ``temperature``/``top_p`` only when not
        the default greedy setting, so the digest of a greedy config is what it always was)."""
        out = self.spec.as_short()
        if self.sim_fault:
            out[SIM_FAULT_KEY] = self.sim_fault
        out.update(self.sampling.short())
        return out

    def extravars(self) -> dict[str, object]:
        """Extra vars for ``playbooks/reconfigure.yml``.

        Keys the algorithm does not use are left out (the play's merge then drops
        the inventory's values for them); ``window`` none is passed as ``"none"`` so
        it overrides an inventory window; ``sim_fault`` only when set.
        """
        out: dict[str, object] = {"algorithm": self.spec.algorithm}
        if self.spec.algorithm != "none":
            out["block_size"] = self.spec.block_size
            out["window"] = "none" if self.spec.window is None else self.spec.window
        if self.spec.algorithm == "ddtree":
            out["budget"] = self.spec.budget
            out["topk"] = self.spec.topk
        if self.sim_fault:
            out[SIM_FAULT_KEY] = self.sim_fault
        out.update(self.extra_vars)  # checked: never a config key nor its role variable
        return out

    def planned(self) -> dict[str, object]:
        """The config as the plan and its result record it."""
        out: dict[str, object] = {"label": self.label, "config": self.short(), "sampling": self.sampling.as_dict()}
        if self.extra_vars:
            out[extravars.GRID_KEY] = dict(self.extra_vars)
        return out

    @property
    def config_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.short(), sort_keys=True).encode()).hexdigest()


def expand_grid(spec: object, *, where: str) -> list[dict[str, object]]:
    """Raw config dicts from a list of configs or a ``{configs, grid}`` mapping."""
    if spec is None:
        return []
    if isinstance(spec, list):
        configs: list[object] = list(spec)
        product: object = None
    elif isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"configs", "grid"})
        if unknown:
            raise PlanError(
                [f"{where}: unknown top-level key(s) {', '.join(map(str, unknown))}; allowed: configs, grid"]
            )
        configs = list(spec.get("configs") or [])
        product = spec.get("grid")
    else:
        raise PlanError(
            [f"{where}: expected a list of configs or a mapping with configs/grid, got {type(spec).__name__}"]
        )
    out: list[dict[str, object]] = []
    problems: list[str] = []
    for index, item in enumerate(configs):
        if not isinstance(item, Mapping):
            problems.append(f"{where}: configs[{index}] is not a mapping of short keys: {item!r}")
            continue
        out.append({str(k): v for k, v in item.items()})
    if product is not None:
        if not isinstance(product, Mapping) or not product:
            problems.append(f"{where}: grid must be a non-empty mapping of short key -> list of values")
        else:
            keys = [str(k) for k in product]
            axes: list[list[object]] = []
            for key in keys:
                values = product[key]
                axes.append(list(values) if isinstance(values, list) else [values])
            out.extend(dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes))
    if problems:
        raise PlanError(problems)
    return out


def load_grid_file(path: Path) -> list[dict[str, object]]:
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise PlanError([f"--grid {path}: {exc}"]) from exc
    if not isinstance(spec, Mapping | list):
        raise PlanError([f"--grid {path}: expected a list of configs or a mapping with configs: and/or grid:"])
    return expand_grid(spec, where=str(path))


def _normalise(raw: Mapping[str, object]) -> dict[str, object]:
    """Drop the unset settings the baseline does not use (a product over all keys hits them), and read the words
    none/null as unset in every key but those where they are a value (``spec_config.NONE_WORD_KEYS``)."""
    out = dict(raw)
    algo = out.get("algorithm")
    if isinstance(algo, str) and algo.strip().lower() == "none":
        for key in spec_config.dropped_keys("none"):
            if key in out and out[key] in (None, "none", "null"):
                out.pop(key)
    for key, value in list(out.items()):
        unset_word = isinstance(value, str) and value.strip().lower() in {"none", "null"}
        if unset_word and key not in spec_config.NONE_WORD_KEYS:
            out[key] = None
    return out


def validate_config(
    raw: Mapping[str, object],
    *,
    simulated: bool,
    drafter_block_size: int | None = None,
    allow_block_mismatch: bool = False,
    sampling: sampling_settings.Sampling | None = None,
) -> PlannedConfig:
    """One raw config -> PlannedConfig, or SpecConfigError with every problem. ``sampling``: the run's
    setting, for an entry that names no ``temperature``/``top_p`` of its own."""
    values = _normalise(raw)
    fault = values.pop(SIM_FAULT_KEY, None)
    problems: list[str] = []
    run_sampling = sampling or sampling_settings.Sampling()
    temperature, top_p = values.pop("temperature", None), values.pop("top_p", None)
    try:
        entry_sampling = sampling_settings.parse(
            run_sampling.temperature if temperature is None else temperature,
            run_sampling.top_p if top_p is None else top_p,
        )
    except sampling_settings.SamplingError as exc:
        problems += exc.problems
        entry_sampling = run_sampling
    extra: dict[str, object] = {}
    if extravars.GRID_KEY in values:
        extra, problems = extravars.check_mapping(values.pop(extravars.GRID_KEY), extravars.GRID_KEY)
    if fault is not None and not (isinstance(fault, str) and fault.strip().lower() in {"", "none"}):
        if not simulated:
            problems.append(f"sim_fault={fault!r} is only allowed for a simulated-engine inventory")
        elif not isinstance(fault, str):
            problems.append(f"sim_fault={fault!r} must be a string such as crash-on-load or mask-offset")
        else:
            try:
                parse_faults([fault])
            except FaultError as exc:
                problems.append(f"sim_fault: {exc}")
    else:
        fault = None
    try:
        spec = spec_config.validate(
            values, drafter_block_size=drafter_block_size, allow_block_mismatch=allow_block_mismatch
        )
    except SpecConfigError as exc:
        raise SpecConfigError(problems + exc.problems) from exc
    if problems:
        raise SpecConfigError(problems)
    return PlannedConfig(
        spec=spec, sim_fault=fault.strip() if isinstance(fault, str) else None, extra_vars=extra,
        sampling=entry_sampling,
    )  # fmt: skip


def describe(raw: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in raw.items()) or "(empty)"


def validate_all(
    raws: Sequence[Mapping[str, object]],
    *,
    simulated: bool,
    drafter_block_size: int | None = None,
    allow_block_mismatch: bool = False,
    sampling: sampling_settings.Sampling | None = None,
) -> list[PlannedConfig]:
    """Validate every config; raise PlanError listing each invalid one (and duplicates)."""
    problems: list[str] = []
    configs: list[PlannedConfig] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raws):
        try:
            cfg = validate_config(
                raw,
                simulated=simulated,
                drafter_block_size=drafter_block_size,
                allow_block_mismatch=allow_block_mismatch,
                sampling=sampling,
            )
        except SpecConfigError as exc:
            problems.append(f"config #{index + 1} ({describe(raw)}): invalid_config: " + "; ".join(exc.problems))
            continue
        if cfg.label in seen:
            problems.append(
                f"config #{index + 1} ({describe(raw)}) duplicates config #{seen[cfg.label] + 1} ({cfg.label})"
            )
            continue
        seen[cfg.label] = index
        configs.append(cfg)
    if problems:
        raise PlanError(problems)
    if not configs:
        raise PlanError(["the grid is empty: nothing to sweep"])
    return configs


def run_order(configs: Sequence[PlannedConfig]) -> list[PlannedConfig]:
    """Baseline first (it is the lossless reference), then the grid's own order."""
    return sorted(configs, key=lambda c: 0 if c.spec.algorithm == "none" else 1)


def grid_from_target(target: Target) -> list[dict[str, object]]:
    spec = target.var("sweep_grid")
    if spec is None:
        raise PlanError([f"{target.inventory}: host {target.host} has no sweep_grid group var; pass --grid FILE"])
    return expand_grid(spec, where=f"{target.inventory}: sweep_grid")

