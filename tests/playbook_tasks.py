"""Walk the tasks of a task file or a playbook, as the layout and keyword tests read them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: the collection's roles: every directory of roles/ with an argument spec
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
#: the keys under which a play or a block holds further tasks
TASK_LISTS = ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers")


def tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every mapping of a loaded task file or playbook (plays, blocks and tasks), depth first."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in TASK_LISTS:
            yield from tasks(node.get(key))
