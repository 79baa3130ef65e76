"""The Ansible side is one collection, ``ddtree.sglang`` (galaxy.yml), whose parts talk through declared interfaces.

1. No role has modules, module_utils or plugins of its own: they are the collection's (``plugins/``), so no role
   uses another role's private code and nothing reaches for it through a global library path.
2. A role is used only by its FQCN (``ddtree.sglang.<role>``), and every ``tasks_from`` names an entry point that
   role declares in its ``meta/argument_specs.yml`` (an interface, its options validated), never a private task
   file: within a role ``include_tasks``/``import_tasks`` is the way, across roles the entry point. The entry point is
   named as declared, without ``.yml``: Ansible looks the spec up under ``tasks_from`` exactly as written, so
   ``tasks_from: lease.yml`` runs the file and validates nothing.
3. Every collection module and action plugin used in a task is used by its FQCN.
4. No playbook or role task includes a task file of another role by path.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.playbook_tasks import ROLES

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "ddtree.sglang."
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py")) + sorted(
    p.stem for p in (ROOT / "plugins" / "action").glob("*.py")
)
ROLE_KEYS = {f"{ns}{verb}" for ns in ("", "ansible.builtin.") for verb in ("include_role", "import_role")}
#: where plays and task lists live (product and test plays alike use the collection the same way)
PLAY_TREES = (
    "roles", "playbooks", "molecule", "tests/install", "tests/rehearsal", "tests/fleet", "tests/deploy", "site.yml",
)  # fmt: skip


def _yaml_files() -> Iterator[Path]:
    for tree in PLAY_TREES:
        base = ROOT / tree
        if base.is_file():
            yield base
            continue
        for path in sorted(base.rglob("*.yml")):
            if "vault" not in path.name and "/group_vars/" not in str(path) and "/host_vars/" not in str(path):
                yield path


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _docs() -> Iterator[tuple[Path, Any]]:
    for path in _yaml_files():
        try:
            yield path, yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:  # a Jinja template or a non-YAML file under a play tree
            continue


def entry_points(role: str) -> set[str]:
    spec = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return set((spec or {}).get("argument_specs") or {})


def _role_uses() -> Iterator[tuple[Path, str, str | None]]:
    """(file, role name as written, tasks_from) for every role use: include/import_role and ``roles:`` entries."""
    for path, doc in _docs():
        for node in _walk(doc):
            for key in ROLE_KEYS & set(node):
                args = node[key]
                if isinstance(args, dict) and "name" in args:
                    yield path, str(args["name"]), args.get("tasks_from")
            roles = node.get("roles")
            if isinstance(roles, list) and "hosts" in node:
                for item in roles:
                    name = item.get("role") or item.get("name") if isinstance(item, dict) else item
                    yield path, str(name), item.get("tasks_from") if isinstance(item, dict) else None


def test_no_role_has_code_of_its_own() -> None:
    subs = ("library", "module_utils", "filter_plugins", "action_plugins")
    own = [str(p.relative_to(ROOT)) for role in ROLES for sub in subs if (p := ROOT / "roles" / role / sub).exists()]
    assert not own, f"move these into the collection's plugins/: {own}"


def test_every_role_use_is_by_fqcn_and_through_a_declared_entry_point() -> None:
    problems = []
    for path, name, tasks_from in _role_uses():
        where = path.relative_to(ROOT)
        if not name.startswith(PREFIX):
            problems.append(f"{where}: role {name!r} by its short name; use {PREFIX}{name}")
            continue
        role = name.removeprefix(PREFIX)
        if role not in ROLES:
            problems.append(f"{where}: no role {role!r} in the collection (roles: {', '.join(ROLES)})")
            continue
        entry = "main" if tasks_from is None else str(tasks_from)
        if entry.endswith(".yml"):  # Ansible looks the spec up under tasks_from as written: "lease.yml" has none
            problems.append(f"{where}: {name} tasks_from {tasks_from!r} names the file, so its argument spec is never "
                            f"validated; name the entry point: {entry.removesuffix('.yml')!r}")  # fmt: skip
        elif entry not in entry_points(role):
            declared = ", ".join(sorted(entry_points(role)))
            problems.append(f"{where}: {name} tasks_from {tasks_from!r} is not an entry point declared in "
                            f"roles/{role}/meta/argument_specs.yml ({declared})")  # fmt: skip
    assert not problems, "\n".join(problems)


def test_the_collections_modules_and_actions_are_used_by_fqcn() -> None:
    problems = []
    for path, doc in _docs():
        for node in _walk(doc):
            for short in set(MODULES) & set(node):
                if "name" in node or any(k in node for k in ("register", "when", "loop", "vars")):
                    problems.append(f"{path.relative_to(ROOT)}: task uses {short!r}; use {PREFIX}{short}")
    assert not problems, "\n".join(problems)


def test_no_task_file_of_another_role_is_included_by_path() -> None:
    problems = []
    for path, doc in _docs():
        for node in _walk(doc):
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks", "include_tasks",
                        "import_tasks"):  # fmt: skip
                target = node.get(key)
                target = target.get("file") if isinstance(target, dict) else target
                if isinstance(target, str) and ("roles/" in target or "role_path" in target or target.startswith("..")):
                    problems.append(f"{path.relative_to(ROOT)}: {key} {target!r} reaches into another role")
    assert not problems, "\n".join(problems)


def test_the_ansible_core_range_is_one_range() -> None:
    """meta/runtime.yml's requires_ansible is the range the preflight role asserts at runtime."""
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    defaults = yaml.safe_load((ROOT / "roles" / "preflight" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    low, high = defaults["preflight_ansible_core_min"], defaults["preflight_ansible_core_max"]
    assert runtime["requires_ansible"] == f">={low}.0,<{high}.0", (runtime, low, high)
