"""No task keyword indented into a module's arguments.

``register:`` (or ``when:``, ``async:``...) one level too deep is YAML-valid and passes yamllint and
ansible-lint, but the module gets it as an argument: a module of this project (its argument spec)
fails the task at run time with "Unsupported parameters ... register", which only a host run shows
(the record of a successful deploy failed that way, so every start was reported as failed).
"""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import ROOT

from tests.playbook_tasks import TASK_LISTS, tasks

#: Task keywords that no module used here takes as an argument (``name``, ``timeout``, ``delay``,
#: ``environment`` and ``tags`` are left out: modules take arguments of those names).
KEYWORDS = frozenset({
    "register", "when", "loop", "loop_control", "changed_when", "failed_when", "until", "retries", "async", "poll",
    "notify", "no_log", "ignore_errors", "become", "become_user", "delegate_to", "run_once", "check_mode", "listen",
})  # fmt: skip
FILES = sorted(
    [*ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml"), *ROOT.glob("playbooks/*.yml"),
     *ROOT.glob("molecule/*/*.yml"), ROOT / "site.yml"]
)  # fmt: skip


def misplaced(path: Path) -> list[str]:
    found = []
    for task in tasks(yaml.safe_load(path.read_text())):
        for key, value in task.items():
            if key in TASK_LISTS or key == "vars" or not isinstance(value, dict):
                continue
            wrong = sorted(KEYWORDS & value.keys())
            if wrong:
                found.append(f"{path.name}: task {task.get('name')!r}: {wrong} under {key}:")
    return found


def test_files_are_found() -> None:
    assert len(FILES) > 40 and ROOT / "roles" / "sglang_service" / "tasks" / "service.yml" in FILES


def test_no_task_keyword_is_a_module_argument() -> None:
    assert [f"{path.parent.relative_to(ROOT)}/{m}" for path in FILES for m in misplaced(path)] == []


def test_the_check_sees_a_misplaced_register(tmp_path: Path) -> None:
    bad = tmp_path / "tasks.yml"
    bad.write_text("- name: Record\n  block:\n    - name: Keep\n      my_module:\n        a: 1\n        register: r\n")
    assert misplaced(bad) == ["tasks.yml: task 'Keep': ['register'] under my_module:"]
