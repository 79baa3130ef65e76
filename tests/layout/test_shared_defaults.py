"""A role reads another role's variable only where ``ddtree_defaults`` holds it, so each shared value has one default.

Before, ``preflight`` read twelve ``sglang_service_*`` variables (and the pinned CUDA, driver and sglang versions)
through ``| default(...)`` fallbacks that restated their owners' defaults: a role used without the other, or an
owner's default changed, gave two values for one setting. Now every variable more than one role reads is a default of
``roles/ddtree_defaults`` (a dependency of every role); a role's own defaults are read by that role only.

What counts as a read: a name in a Jinja expression (``{{ }}``, ``{% %}``, or a conditional such as ``when:``) of a
role's ``tasks``, ``handlers``, ``vars``, ``defaults`` or ``templates``; a mapping key is not (a key under ``vars:``
of an ``include_role`` passes an argument to that role's entry point), nor is a string literal or a comment. A
published fact (``preflight_gpu_device_nodes``, ``cuda_toolkit_home``) is no role's default and may be read anywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from tests.playbook_tasks import ROLES

ROOT = Path(__file__).resolve().parents[2]
SHARED_ROLE = "ddtree_defaults"
READ_DIRS = ("tasks", "handlers", "vars", "defaults", "templates")


def _defaults(role: str) -> set[str]:
    path = ROOT / "roles" / role / "defaults" / "main.yml"
    return set(yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else set()


CONDITIONALS = frozenset({"when", "that", "failed_when", "changed_when", "until"})


def _names(expression: str) -> set[str]:
    """The variable-like names of a Jinja expression, its string literals left out."""
    code = re.sub(r"'[^']*'|\"[^\"]*\"", " ", expression)
    return set(re.findall(r"\b[a-z][a-z0-9_]*\b", code))


def _template_reads(text: str) -> set[str]:
    return {n for block in re.findall(r"\{\{(.*?)\}\}|\{%(.*?)%\}", text, re.S) for part in block for n in _names(part)}


def _yaml_reads(node: object, key: str = "") -> set[str]:
    if isinstance(node, dict):
        return {n for k, v in node.items() for n in _yaml_reads(v, str(k))}
    if isinstance(node, list):
        return {n for item in node for n in _yaml_reads(item, key)}
    if isinstance(node, str):
        return _names(node) if key in CONDITIONALS else _template_reads(node)
    return set()


def _reads(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return _yaml_reads(yaml.safe_load(text)) if path.suffix in (".yml", ".yaml") else _template_reads(text)


def cross_reads() -> list[str]:
    owner = {name: role for role in ROLES if role != SHARED_ROLE for name in _defaults(role)}
    found = []
    for role in ROLES:
        for sub in READ_DIRS:
            for path in sorted((ROOT / "roles" / role / sub).rglob("*")):
                if not path.is_file():
                    continue
                for name in sorted(_reads(path)):
                    if owner.get(name, role) != role:
                        found.append(f"{path.relative_to(ROOT)} reads {name} (a default of {owner[name]})")
    return found


def test_no_role_reads_another_roles_own_default() -> None:
    found = cross_reads()
    assert found == [], "move these to roles/ddtree_defaults (one default for every reader):\n" + "\n".join(found)


def test_every_role_depends_on_the_shared_defaults() -> None:
    for role in ROLES:
        if role == SHARED_ROLE:
            continue
        meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text(encoding="utf-8"))
        deps = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
        assert f"ddtree.sglang.{SHARED_ROLE}" in deps, f"roles/{role}/meta/main.yml: dependencies {deps}"


def test_no_shared_value_is_restated_as_a_fallback() -> None:
    shared = _defaults(SHARED_ROLE)
    restated = []
    for path in sorted(ROOT.glob("roles/*/*/*.yml")) + sorted(ROOT.glob("playbooks/*.yml")):
        for name in shared:
            if re.search(rf"\b{name}\b\s*\|\s*default\((?!\s*\[\]\s*,\s*true)", path.read_text(encoding="utf-8")):
                restated.append(f"{path.relative_to(ROOT)}: {name} | default(...)")
    assert restated == [], restated
