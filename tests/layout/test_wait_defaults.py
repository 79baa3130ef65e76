"""The waits' common arguments are written once: ``module_defaults`` on the import of ``service.yml`` (which includes
``rollback.yml``) in sglang_service's ``tasks/main.yml``; every wait call in those files gives only what differs.

Before, eight wait calls restated 4-8 arguments each (43 lines), so a new argument meant eight edits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.playbook_tasks import tasks

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "roles" / "sglang_service" / "tasks"
WAITS = ("ddtree.sglang.sglang_stop_wait", "ddtree.sglang.sglang_wait_ready")
#: the task files that run under the import's module_defaults (service.yml includes rollback.yml)
COVERED = ("service.yml", "rollback.yml")


def _module_defaults() -> dict[str, dict[str, Any]]:
    for task in tasks(yaml.safe_load((TASKS / "main.yml").read_text(encoding="utf-8"))):
        if task.get("ansible.builtin.import_tasks") == "service.yml":
            return dict(task.get("module_defaults") or {})
    raise AssertionError("roles/sglang_service/tasks/main.yml does not import service.yml")


def _wait_calls() -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(file, task name, module, arguments) of every wait call in the covered files."""
    for name in COVERED:
        for task in tasks(yaml.safe_load((TASKS / name).read_text(encoding="utf-8"))):
            for module in WAITS:
                if module in task:
                    yield name, str(task.get("name")), module, dict(task[module] or {})


def test_the_waits_common_arguments_are_module_defaults() -> None:
    defaults = _module_defaults()
    assert set(defaults) == set(WAITS), f"module_defaults on the service.yml import name {sorted(defaults)}"
    for module in WAITS:
        assert {"unit", "port", "host", "timeout"} <= set(defaults[module]), (module, defaults[module])


def test_no_wait_call_restates_a_default() -> None:
    defaults = _module_defaults()
    calls = list(_wait_calls())
    assert len(calls) >= 8, [c[:2] for c in calls]  # the stops and waits of the restart chain and the rollback
    restated = [
        f"{file}: {task!r}: {key}: {value!r}"
        for file, task, module, args in calls
        for key, value in args.items()
        if defaults.get(module, {}).get(key, object()) == value
    ]
    assert not restated, "\n".join(restated)
