"""Sweep plan: which configs, on which host, with which benchmark settings.

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
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from repro_py import spec_config
from repro_py.endpoint import Endpoint
from repro_py.simengine.faults import FaultError, parse_faults
from repro_py.spec_config import SpecConfig, SpecConfigError
from repro_py.sweep import extravars

SIM_FAULT_KEY = extravars.SIM_FAULT_KEY
DEFAULT_CONTEXTS: tuple[int, ...] = (60, 1024, 4096)
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 8, 32)
DEFAULT_REPEATS = 3
DEFAULT_MAX_TOKENS = 512
#: Fallback estimates when neither the inventory nor earlier runs say better.
DEFAULT_LOAD_S = {"real": 420.0, "simulated": 20.0}  # simulated: mostly the play's own overhead
DEFAULT_CELL_S = {"real": 45.0, "simulated": 1.0}
DEFAULT_GATES_S = {"real": 120.0, "simulated": 2.0}


class PlanError(Exception):
    """The plan cannot be made; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class PlannedConfig:
    """One validated config: the spec settings plus an optional simulated fault."""

    spec: SpecConfig
    sim_fault: str | None = None
    #: the grid entry's own extra vars: passed to this config's play only; not part of the label
    extra_vars: Mapping[str, object] = dataclasses.field(default_factory=dict, hash=False)

    @property
    def label(self) -> str:
        return spec_config.run_label(self.spec, self.sim_fault)

    def short(self) -> dict[str, object]:
        """The config in short keys (as in results and extra vars)."""
        out = self.spec.as_short()
        if self.sim_fault:
            out[SIM_FAULT_KEY] = self.sim_fault
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
        out: dict[str, object] = {"label": self.label, "config": self.short()}
        if self.extra_vars:
            out[extravars.GRID_KEY] = dict(self.extra_vars)
        return out

    @property
    def config_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.short(), sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    repeats: int = DEFAULT_REPEATS
    max_tokens: int = DEFAULT_MAX_TOKENS

    @property
    def cells(self) -> int:
        return len(self.contexts) * len(self.concurrency)

    def as_dict(self) -> dict[str, object]:
        return {
            "contexts": list(self.contexts),
            "concurrency": list(self.concurrency),
            "repeats": self.repeats,
            "max_tokens": self.max_tokens,
        }


@dataclasses.dataclass(frozen=True)
class Target:
    """The one host a sweep reconfigures and measures."""

    inventory: Path
    host: str
    hostvars: Mapping[str, Any]
    endpoint: Endpoint
    engine_kind: str  # "simulated" | "real"

    @property
    def simulated(self) -> bool:
        return self.engine_kind == "simulated"

    def var(self, name: str, default: Any = None) -> Any:
        return self.hostvars.get(name, default)


@dataclasses.dataclass(frozen=True)
class Plan:
    target: Target
    configs: tuple[PlannedConfig, ...]
    default_config: PlannedConfig | None
    bench: BenchPlan
    grid_source: str
    estimate: Mapping[str, float]

    @property
    def simulated(self) -> bool:
        return self.target.simulated

    def as_dict(self, run_id: str) -> dict[str, object]:
        return {
            "schema": 1,
            "run_id": run_id,
            "simulated": self.simulated,
            "engine_kind": self.target.engine_kind,
            "banner": "SIMULATED engine: figures are from a model, not hardware" if self.simulated else None,
            "inventory": str(self.target.inventory),
            "host": self.target.host,
            "endpoint": self.target.endpoint.base_url,
            "grid_source": self.grid_source,
            "configs": [c.planned() for c in self.configs],
            "default_config": None if self.default_config is None else self.default_config.short(),
            "bench": self.bench.as_dict(),
            "estimate": dict(self.estimate),
            "estimate_basis": estimate_basis(self.estimate),
        }


# ---------------------------------------------------------------- inventory


def _tool(name: str) -> str:
    """An Ansible executable: next to this interpreter first, then PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise PlanError([f"{name} is not installed (expected next to {sys.executable} or on PATH)"])
    return found


def inventory_list(inventory: Path) -> dict[str, Any]:
    """``ansible-inventory --list`` as JSON (group vars merged into hostvars)."""
    env = dict(os.environ)
    env.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")
    proc = subprocess.run(
        [_tool("ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    if proc.returncode != 0:
        raise PlanError(
            [f"ansible-inventory -i {inventory} --list failed (rc={proc.returncode}): {proc.stderr.strip()}"]
        )
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _hosts_of(data: Mapping[str, Any]) -> list[str]:
    hostvars: Mapping[str, Any] = data.get("_meta", {}).get("hostvars", {})
    hosts: set[str] = set(hostvars)
    for group, body in data.items():
        if group == "_meta" or not isinstance(body, Mapping):
            continue
        hosts.update(body.get("hosts", []) or [])
    return sorted(hosts)


def engine_kind_of(hostvars: Mapping[str, Any]) -> str:
    """``simulated`` or ``real`` from the inventory (``sglang_service_engine``)."""
    for key in ("sglang_service_engine", "sglang_engine_kind", "sglang_engine", "engine_kind"):
        value = hostvars.get(key)
        if isinstance(value, str) and value.strip():
            return "simulated" if value.strip().lower() in {"simulated", "sim", "simengine"} else "real"
    if hostvars.get("sglang_simulated") is True:
        return "simulated"
    return "real"


def endpoint_of(host: str, hostvars: Mapping[str, Any]) -> Endpoint:
    explicit = hostvars.get("sweep_endpoint_url")
    api_key = hostvars.get("sglang_service_api_key") or None
    model = str(hostvars.get("sglang_service_served_model_name") or "default")
    if isinstance(explicit, str) and explicit.strip():
        return Endpoint(explicit, api_key=api_key, model=model)
    port = hostvars.get("sglang_service_port", 30001)
    return Endpoint(f"http://{endpoint_address(host, hostvars)}:{port}", api_key=api_key, model=model)


_LOCAL_CONNECTIONS = ("local", "podman", "docker", "containers.podman.podman", "community.docker.docker")
_WILDCARD = ("", "0.0.0.0", "::", "[::]")


def endpoint_address(host: str, hostvars: Mapping[str, Any]) -> str:
    """Where the controller reaches the engine.

    ``sweep_endpoint_host`` when set; for a host on this machine (local, podman or
    docker connection; the test host shares the network) the service's own bind
    address (loopback unless it binds a specific address); otherwise a specific
    ``sglang_service_host``, then ``ansible_host``, then the inventory name.
    """
    explicit = hostvars.get("sweep_endpoint_host")
    if isinstance(explicit, str) and explicit:
        return explicit
    bind = str(hostvars.get("sglang_service_host") or "")
    if str(hostvars.get("ansible_connection") or "") in _LOCAL_CONNECTIONS:
        return "127.0.0.1" if bind in _WILDCARD else bind
    if bind not in _WILDCARD and bind not in ("127.0.0.1", "localhost", "::1"):
        return bind
    return str(hostvars.get("ansible_host") or host)


def load_target(inventory: Path, *, limit: str | None = None, data: Mapping[str, Any] | None = None) -> Target:
    """The single host of ``inventory`` (or the one ``limit`` names)."""
    if data is None:
        data = inventory_list(inventory)
    hosts = _hosts_of(data)
    if limit:
        wanted = {h.strip() for h in limit.split(",") if h.strip()}
        groups = {g for g in wanted if isinstance(data.get(g), Mapping)}
        selected = [h for h in hosts if h in wanted]
        for group in groups:
            selected.extend(data[group].get("hosts", []) or [])
        hosts = sorted(set(selected))
    if not hosts:
        raise PlanError([f"no host in {inventory}" + (f" matching --limit-hosts {limit}" if limit else "")])
    if len(hosts) > 1:
        raise PlanError(
            [f"{inventory} has {len(hosts)} hosts ({', '.join(hosts)}); a sweep measures one: pass --limit-hosts HOST"]
        )
    host = hosts[0]
    hostvars: Mapping[str, Any] = data.get("_meta", {}).get("hostvars", {}).get(host, {})
    try:
        endpoint = endpoint_of(host, hostvars)
    except ValueError as exc:
        raise PlanError([f"endpoint of {host}: {exc}"]) from exc
    return Target(
        inventory=inventory, host=host, hostvars=hostvars, endpoint=endpoint, engine_kind=engine_kind_of(hostvars)
    )


# ---------------------------------------------------------------- grid


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
    """Drop keys irrelevant to an algorithm (a product over all keys hits them) only for the baseline."""
    out = dict(raw)
    algo = out.get("algorithm")
    if isinstance(algo, str) and algo.strip().lower() == "none":
        for key in ("budget", "topk", "window", "block_size"):
            if key in out and out[key] in (None, "none", "null"):
                out.pop(key)
    for key, value in list(out.items()):
        if key not in {"window", "algorithm"} and isinstance(value, str) and value.strip().lower() in {"none", "null"}:
            out[key] = None
    return out


def validate_config(
    raw: Mapping[str, object],
    *,
    simulated: bool,
    drafter_block_size: int | None = None,
    allow_block_mismatch: bool = False,
) -> PlannedConfig:
    """One raw config -> PlannedConfig, or SpecConfigError with every problem."""
    values = _normalise(raw)
    fault = values.pop(SIM_FAULT_KEY, None)
    problems: list[str] = []
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
    return PlannedConfig(spec=spec, sim_fault=fault.strip() if isinstance(fault, str) else None, extra_vars=extra)


def describe(raw: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in raw.items()) or "(empty)"


def validate_all(
    raws: Sequence[Mapping[str, object]],
    *,
    simulated: bool,
    drafter_block_size: int | None = None,
    allow_block_mismatch: bool = False,
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


# ---------------------------------------------------------------- estimate


def history(results_root: Path, host: str) -> tuple[float | None, float | None, float | None, int]:
    """Medians from earlier runs on ``host``: restart time, benchmark time per cell per (repeat x
    output token), gates time; and how many earlier configs they come from.

    The restart time is the whole reconfigure (the play's own overhead included)
    where recorded, else the engine's time to ready.
    """
    restarts: list[float] = []
    per_cell: list[float] = []
    gates: list[float] = []
    count = 0
    if not results_root.is_dir():
        return None, None, None, 0
    for path in results_root.glob("*/configs/*.json"):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("fingerprint", {}).get("host") != host or doc.get("status") != "ok":
            continue
        count += 1
        timing = doc.get("timing") or {}
        recon = doc.get("reconfigure") or {}
        if isinstance(timing.get("reconfigure_s"), int | float):
            restarts.append(float(timing["reconfigure_s"]))
        elif isinstance(recon.get("time_to_ready_s"), int | float):
            restarts.append(float(recon["time_to_ready_s"]))
        bench = doc.get("bench") or {}
        cells = bench.get("cells") or []
        settings = bench.get("settings") or {}
        work = float(settings.get("repeats") or 1) * float(settings.get("max_tokens") or 1)
        if cells and isinstance(timing.get("bench_s"), int | float):
            per_cell.append(float(timing["bench_s"]) / len(cells) / max(work, 1.0))
        if isinstance(timing.get("gates_s"), int | float):
            gates.append(float(timing["gates_s"]))

    def med(values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    return med(restarts), med(per_cell), med(gates), count


def estimate(
    target: Target, configs: Sequence[PlannedConfig], bench: BenchPlan, results_root: Path
) -> dict[str, float]:
    kind = target.engine_kind
    hist_load, hist_cell, hist_gates, measured = history(results_root, target.host)
    load = target.var("sweep_load_time_s") or hist_load or DEFAULT_LOAD_S[kind]
    if hist_cell is not None:
        hist_cell *= bench.repeats * bench.max_tokens
    cell = target.var("sweep_cell_time_s") or hist_cell or DEFAULT_CELL_S[kind] * bench.repeats
    gates = target.var("sweep_gates_time_s") or hist_gates or DEFAULT_GATES_S[kind]
    per_config = float(load) + float(cell) * bench.cells + float(gates)
    restore = float(load)
    return {
        "load_s_per_config": float(load),
        "bench_s_per_cell": float(cell),
        "gates_s_per_config": float(gates),
        "per_config_s": per_config,
        "total_s": per_config * len(configs) + restore,
        "history_configs": float(measured),
        "inventory_figures": float(
            sum(1 for k in ("sweep_load_time_s", "sweep_cell_time_s", "sweep_gates_time_s") if target.var(k))
        ),
    }


def estimate_basis(est: Mapping[str, float]) -> str:
    """Where an estimate's figures come from, in words (a fresh host has no measured history)."""
    measured = int(est.get("history_configs", 0))
    given = int(est.get("inventory_figures", 0))
    parts = [f"measured history: {measured} config(s) of earlier runs on this host"] if measured else []
    if given:
        parts.append(f"{given} figure(s) from the inventory (sweep_*_time_s)")
    if not measured:
        parts.append("no measured history: estimate from defaults" if not given else "no measured history")
    return "; ".join(parts)


def make_plan(
    target: Target,
    raws: Sequence[Mapping[str, object]],
    *,
    grid_source: str,
    bench: BenchPlan,
    results_root: Path,
) -> Plan:
    drafter_bs = target.var("sweep_drafter_block_size")
    drafter_block_size = drafter_bs if isinstance(drafter_bs, int) and not isinstance(drafter_bs, bool) else None
    allow = target.var("sglang_service_allow_block_mismatch") is True
    configs = run_order(
        validate_all(
            raws, simulated=target.simulated, drafter_block_size=drafter_block_size, allow_block_mismatch=allow
        )
    )
    default_raw = target.var("sweep_default_config")
    default: PlannedConfig | None = None
    if isinstance(default_raw, Mapping):
        try:
            default = validate_config(
                default_raw,
                simulated=target.simulated,
                drafter_block_size=drafter_block_size,
                allow_block_mismatch=allow,
            )
        except SpecConfigError as exc:
            raise PlanError(
                [f"sweep_default_config ({describe(default_raw)}): invalid_config: " + "; ".join(exc.problems)]
            ) from exc
    return Plan(
        target=target,
        configs=tuple(configs),
        default_config=default,
        bench=bench,
        grid_source=grid_source,
        estimate=estimate(target, configs, bench, results_root),
    )


def grid_from_target(target: Target) -> list[dict[str, object]]:
    spec = target.var("sweep_grid")
    if spec is None:
        raise PlanError([f"{target.inventory}: host {target.host} has no sweep_grid group var; pass --grid FILE"])
    return expand_grid(spec, where=f"{target.inventory}: sweep_grid")


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
