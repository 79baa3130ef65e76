"""Write the winner back to the inventory as a reviewed change: a host_vars file with its provenance.

The change is one file, ``<inventory>/host_vars/<host>/tune.yml`` (host
variables outrank the inventory's group variables, so the tuned config wins
over ``group_vars/all/service.yml`` without editing it, and removing the file
undoes the change). It sets the role variables of the service
(``sglang_service_spec_algorithm``, ``..._ddtree_budget``, ``..._ddtree_topk``,
``..._draft_window``, ``..._block_size``) and ``sweep_default_config`` (so a
later sweep restores the tuned config), under a comment that says where the
values come from: run id, the SHA-256 of the run's ``MANIFEST.sha256``, the
date, the objective, the figure with its interval, margin and confidence.

It is shown as a unified diff first and written (atomically) only when asked;
after writing, the inventory is read back with ``ansible-inventory`` and the
host's resolved variables must equal the winner, or the write is reported as
not in effect.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from repro_py.atomicio import write_text_atomic
from repro_py.tune.sweepio import PlannedConfig, Target, load_target

#: short key -> the sglang_service role variable it sets (roles/sglang_service/tasks/resolve.yml maps the same way)
ROLE_VARS: dict[str, str] = {
    "algorithm": "sglang_service_spec_algorithm",
    "budget": "sglang_service_ddtree_budget",
    "topk": "sglang_service_ddtree_topk",
    "window": "sglang_service_draft_window",
    "block_size": "sglang_service_block_size",
}
FILE_NAME = "tune.yml"


class WriteBackError(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Change:
    path: Path
    old: str
    new: str
    values: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.old != self.new

    def diff(self) -> str:
        try:
            shown = str(self.path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            shown = str(self.path)
        return "".join(
            difflib.unified_diff(
                self.old.splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                fromfile=shown if self.old else "/dev/null",
                tofile=shown,
            )
        )


def role_values(cfg: PlannedConfig) -> dict[str, Any]:
    """The role variables for ``cfg`` (settings the algorithm does not use are null, as the role sets them)."""
    short = cfg.spec.as_short()
    return {var: short.get(key) for key, var in ROLE_VARS.items()}


def target_file(inventory: Path, host: str) -> Path:
    base = inventory if inventory.is_dir() else inventory.parent
    single = base / "host_vars" / f"{host}.yml"
    if single.exists() or (base / "host_vars" / f"{host}.yaml").exists():
        raise WriteBackError(
            f"{single} exists as a file; move it to {base / 'host_vars' / host}/ (a directory of files) so the "
            f"tuned values can live in their own {FILE_NAME}"
        )
    return base / "host_vars" / host / FILE_NAME


def manifest_sha256(run_path: Path) -> str:
    path = run_path / "MANIFEST.sha256"
    if not path.is_file():
        raise WriteBackError(f"{path} is missing: the run must be sealed (report + manifest) before it is written back")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def render(cfg: PlannedConfig, provenance: Mapping[str, str]) -> str:
    values = role_values(cfg)
    default = {k: v for k, v in cfg.spec.as_short().items() if v is not None}
    lines = ["---", "# Written by `python -m repro_py.tune` (review it like any change; delete the file to undo)."]
    lines += [f"# {key}: {value}" for key, value in provenance.items()]
    body = yaml.safe_dump(values, sort_keys=False, default_flow_style=False)
    body += yaml.safe_dump({"sweep_default_config": default}, sort_keys=False, default_flow_style=None)
    return "\n".join(lines) + "\n" + body


def propose(inventory: Path, host: str, cfg: PlannedConfig, provenance: Mapping[str, str]) -> Change:
    path = target_file(inventory, host)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    return Change(path=path, old=old, new=render(cfg, provenance), values=role_values(cfg))


def in_effect(target: Target, cfg: PlannedConfig) -> list[str]:
    """Differences between the winner and what the inventory resolves for the host now (empty: in effect)."""
    want = role_values(cfg)
    out = []
    for var, value in want.items():
        have = target.hostvars.get(var)
        if have != value and not (value is None and have in ("none", "None", "null")):
            out.append(f"{var}: inventory has {have!r}, winner is {value!r}")
    return out


def write(change: Change, inventory: Path, host: str, cfg: PlannedConfig) -> list[str]:
    """Write the file atomically, read the inventory back; the differences that remain (empty: in effect)."""
    write_text_atomic(change.path, change.new)
    return in_effect(load_target(inventory, limit=host), cfg)
