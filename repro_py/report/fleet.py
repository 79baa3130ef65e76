"""The report of a fleet sweep (``python -m repro_py.sweep INVENTORY`` over several hosts): ``fleet.md``.

A fleet run's directory holds ``fleet.json`` (the classes, the hosts with their status, offset and restore, the
events), ``state.json`` and one ordinary run directory per hardware class. :func:`build_fleet_report` writes each
class's own report (:func:`repro_py.report.render.build_report`, its figures corrected by each host's offset) and
``fleet.md`` over them: per class its hardware, its hosts (status and why, offset, configs measured, the default
config restore) and a link to its summary; the hosts refused at the start; the events. Figures of two classes are
never compared. A failure is given in words, never as a figure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro_py.atomicio import write_text_atomic
from repro_py.report import recommend, tables
from repro_py.report.hosts import signed_pct
from repro_py.report.render import TEMPLATE_DIR, build_report, environment
from repro_py.simmark import sim_note

FLEET_FILE = "fleet.json"
FLEET_TEMPLATE = "fleet.md.j2"


class FleetError(ValueError):
    """A fleet.json that cannot be read as one (names the file and why)."""


def is_fleet_run(path: Path) -> bool:
    """True when ``path`` is a fleet sweep's run directory (it holds ``fleet.json``)."""
    return (path / FLEET_FILE).is_file()


def load_fleet(run_path: Path) -> dict[str, Any]:
    path = run_path / FLEET_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FleetError(f"{path}: not readable as JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise FleetError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    for key in ("classes", "hosts"):
        if not isinstance(doc.get(key) or {}, Mapping):
            raise FleetError(f"{path}: '{key}' is {doc.get(key)!r}; expected a mapping")
    return doc


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def offset_text(offset: Mapping[str, Any]) -> str:
    """``+3.1% ± 1.2% (3 cells)``; ``not measured: <reason>`` when the host gave no offset."""
    value, spread = offset.get("offset"), offset.get("uncertainty")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not measured: {offset.get('reason') or 'no reason given'}"
    text = signed_pct(float(value))
    if isinstance(spread, int | float) and not isinstance(spread, bool):
        text += f" ± {float(spread):.1%}"
    cells = offset.get("cells")
    return text + (f" ({cells} cells)" if isinstance(cells, int) and not isinstance(cells, bool) else "")


def restore_text(restore: object) -> str:
    """The default config restore on the host, in words (``not reached``: the run never got there)."""
    if not isinstance(restore, Mapping):
        return "not reached"
    status = str(restore.get("status") or "unknown").replace("_", " ")
    reason = restore.get("reason")
    return f"{status}: {reason}" if reason else status


def host_row(name: str, host: Mapping[str, Any]) -> dict[str, Any]:
    offset = _mapping(host.get("offset"))
    configs = [str(c) for c in host.get("configs") or []]
    return {
        "name": name,
        "class": host.get("class"),
        "status": host.get("status") or "unknown",
        "cause": host.get("cause"),
        "offset": offset_text(offset) if offset else "not measured",
        "flagged": "yes: " + str(offset.get("reason") or "") if offset.get("flagged") else "no",
        "offset_reason": offset.get("reason"),
        "configs": ", ".join(configs) if configs else "none",
        "restore": restore_text(host.get("restore")),
        "endpoint": host.get("endpoint"),
    }


def _class_section(run_path: Path, key: str, klass: Mapping[str, Any], hosts: list[dict[str, Any]]) -> dict[str, Any]:
    directory = str(klass.get("dir") or key)
    class_path = run_path / directory
    run = tables.load_run(class_path)
    winners = [w.as_dict() for w in recommend.recommend(tables.rows(run))] if run.results else []
    return {
        "key": key,
        "info": _mapping(klass.get("info")),
        "dir": directory,
        "summary": f"{directory}/summary.md" if run.results else None,
        "results": len(run.results),
        "hosts": hosts,
        "winners": winners,
        "sim_speeds": run.sim_speeds,
        "refused_results": run.refused,
    }


def context(run_path: Path, fleet: Mapping[str, Any]) -> dict[str, Any]:
    classes = _mapping(fleet.get("classes"))
    all_hosts = {str(name): host_row(str(name), _mapping(h)) for name, h in _mapping(fleet.get("hosts")).items()}
    used = {n: h for n, h in all_hosts.items() if h["status"] != "refused"}
    sections, placed = [], set()
    for key, klass in classes.items():
        listed = [str(n) for n in _mapping(klass).get("hosts") or []]
        names = [n for n in listed if n in used] + [n for n, h in used.items() if h["class"] == key and n not in listed]
        placed.update(names)
        sections.append(_class_section(run_path, str(key), _mapping(klass), [used[n] for n in names]))
    speeds = [s for section in sections for s in section["sim_speeds"]]
    try:
        state = _mapping(json.loads((run_path / "state.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        state = {}
    reference = _mapping(fleet.get("reference"))
    counts: dict[str, int] = {}
    for h in all_hosts.values():
        counts[h["status"]] = counts.get(h["status"], 0) + 1
    return {
        "run_id": fleet.get("run_id") or run_path.name,
        "simulated": fleet.get("simulated") is True,
        "sim_note": sim_note(speeds),
        "inventory": fleet.get("inventory"),
        "state": state.get("status") or "unknown",
        "reference": reference.get("label"),
        "reference_config": ", ".join(f"{k}={v}" for k, v in _mapping(reference.get("config")).items()),
        "offset_limit": fleet.get("offset_limit"),
        "counts": ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none",
        "classes": sections,
        "homeless": [h for n, h in used.items() if n not in placed],
        "refused": [h for h in all_hosts.values() if h["status"] == "refused"],
        "events": [_mapping(e) for e in fleet.get("events") or []],
        "wall_s": fleet.get("wall_s"),
    }


def class_dirs(run_path: Path) -> list[Path]:
    """The run directory of each class of the fleet run at ``run_path`` (those that exist)."""
    classes = _mapping(load_fleet(run_path).get("classes"))
    paths = [run_path / str(_mapping(klass).get("dir") or key) for key, klass in classes.items()]
    return [path for path in paths if path.is_dir()]


def build_fleet_report(run_path: Path, *, template_dir: Path = TEMPLATE_DIR) -> dict[str, Path]:
    """Write each class's report (summary.md, summary.csv, plots/) and ``fleet.md``; return their paths, a class's
    keyed ``<class-key>/<name>``."""
    fleet = load_fleet(run_path)
    out: dict[str, Path] = {}
    for class_path in class_dirs(run_path):
        if any((class_path / "configs").glob("*.json")):
            key = class_path.relative_to(run_path).as_posix()
            out.update({f"{key}/{name}": path for name, path in build_report(class_path).items()})
    text = environment(template_dir).get_template(FLEET_TEMPLATE).render(**context(run_path, fleet))
    fleet_md = run_path / "fleet.md"
    write_text_atomic(fleet_md, text)
    return {"fleet_md": fleet_md, **out}
