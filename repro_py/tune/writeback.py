"""Write the winner back to the inventory as a reviewed change: a host_vars file with its provenance.

The change is one file per host, ``<inventory>/host_vars/<host>/tune.yml`` (host
variables outrank the inventory's group variables, so the tuned config wins
over ``group_vars/all/service.yml`` without editing it, and removing the file
undoes the change). It sets the role variables of the service
(``sglang_service_spec_algorithm``, ``..._ddtree_budget``, ``..._ddtree_topk``,
``..._draft_window``, ``..._block_size``) and ``sweep_default_config`` (so a
later sweep restores the tuned config), under a comment that says where the
values come from: run id, the SHA-256 of the run's ``MANIFEST.sha256``, the
date, the objective, the figure with its interval, margin and confidence.

It is proposed only when the evidence supports replacing the current config:
the winner is ahead of it with the run's confidence, or the current config
failed, garbled or broke an SLO (:func:`repro_py.tune.verdict.versus_current`).
It is shown as a unified diff first and written (atomically) only when asked;
after writing, the inventory is read back with ``ansible-inventory`` and the
host's resolved variables must equal the winner, or the write is reported as
not in effect.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from repro_py import spec_config
from repro_py.atomicio import write_text_atomic
from repro_py.exitcodes import ExitCode
from repro_py.tune import verdict
from repro_py.tune.search import Search
from repro_py.tune.sweepio import PlannedConfig, RunDir, Target, reload_target, resume_command, source_args

#: short key -> the sglang_service role variable it sets (roles/sglang_service/tasks/resolve.yml maps the same way)
ROLE_VARS: dict[str, str] = spec_config.ROLE_VARS
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
        shown = _shown(self.path)
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


def write_change(change: Change, target: Target, cfg: PlannedConfig) -> list[str]:
    """Write the file atomically, read the inventory back (its layers and vault options as the run had them);
    the differences that remain (empty: in effect)."""
    write_text_atomic(change.path, change.new)
    return in_effect(reload_target(target), cfg)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def offer(
    console: Console,
    search: Search,
    run_dir: RunDir,
    targets: Sequence[Target],
    *,
    inventory: Path,
    results: Path,
    write: bool,
    ask: bool,
    options: Sequence[str] = (),
) -> int:
    """Show the first objective's winner as a diff of the inventory (a file per host of ``targets``: the host the
    run tuned, or every host of the class it tuned on), when the evidence supports replacing the current config;
    write it when ``write`` (or the answer to the question, when ``ask``); the exit code. ``options``: the run's
    own settings the printed command keeps (``--reconfigurer local``, ``-e``, ``--limit-hosts``)."""
    primary = search.settings.objectives[0]
    winner = next(w for w in verdict.winners(search) if w.objective.key == primary.key)
    if winner.label is None or winner.estimate is None:
        console.print(f"[yellow]nothing to write back: no winner for {primary.key} ({winner.note})[/]")
        return ExitCode.OK
    cfg = search.space.by_label()[winner.label]
    behind = [t for t in targets if in_effect(t, cfg)]
    if not behind:
        console.print(f"the inventory already runs the {primary.key} winner {winner.label}; nothing to write")
        return ExitCode.OK
    versus = verdict.versus_current(search, winner)
    if versus is None or not versus.replace:
        why = "no comparison with the current config" if versus is None else versus.text
        console.print(f"nothing to write back for {primary.key}: {why}", markup=False, highlight=False)
        return ExitCode.OK
    margin = "" if winner.margin is None else f", margin {winner.margin:.1%} over {winner.runner_up}"
    confidence = "" if winner.confidence is None else f", confidence {winner.confidence:.0%}"
    provenance = {
        "objective": primary.title,
        "winner": f"{winner.label}: {winner.estimate.text()} tok/s{margin}{confidence}"
        + (" (SIMULATED engine)" if behind[0].simulated else ""),
        "versus the current config": versus.text,
        "run id": run_dir.run_id,
        "manifest sha256": manifest_sha256(run_dir.path),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "report": _shown(run_dir.path / "tune" / "report.md"),
    }
    if len(targets) > 1:
        provenance["measured on"] = ", ".join(t.host for t in targets) + " (one hardware class, side by side)"
    try:
        changes = [(propose(inventory, t.host, cfg, provenance), t) for t in behind]
    except WriteBackError as exc:
        console.print(f"[red]write-back refused: {exc}[/]")
        return ExitCode.FAILURE
    for change, _ in changes:
        console.print(f"proposed change to the inventory ({change.path}):")
        console.print(change.diff(), markup=False, highlight=False, soft_wrap=True)
    do_write = write
    if not do_write and ask:
        names = ", ".join(str(c.path) for c, _ in changes)
        do_write = console.input(f"write {names}? [y/N] ").strip().lower() in {"y", "yes"}
    if not do_write:
        command = resume_command(
            str(inventory), run_dir.run_id, tool="repro_py.tune", results=results, sources=source_args(targets[0]),
            options=[*options, "--write"],
        )  # fmt: skip
        console.print(f"not written; to write it: {command}", markup=False, highlight=False, soft_wrap=True)
        return ExitCode.OK
    code = ExitCode.OK
    for change, target in changes:
        remaining = write_change(change, target, cfg)
        if remaining:
            console.print(f"[red]{change.path} was written but is not in effect:[/]")
            for line in remaining:
                console.print(f"  - {line}", markup=False, highlight=False)
            code = ExitCode.FAILURE
            continue
        console.print(f"written {change.path}; ansible-inventory now resolves {winner.label} for {target.host}.",
                      highlight=False)  # fmt: skip
    if code == ExitCode.OK:
        console.print(f"Apply it with: ansible-playbook -i {inventory} site.yml", highlight=False)
    return code
