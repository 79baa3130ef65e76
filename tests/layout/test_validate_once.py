"""The controller's contract check runs once per play, and the drafter's block size is read in one place.

``ddtree.sglang.ddtree_validate`` is called by one task, ``resolve.yml`` (run by validate_inventory before any
host is contacted, skipped by the role's main when that has run). The drafter check that needs the host's
``config.json`` is the filter ``ddtree.sglang.drafter_block_problems`` (``spec_config``'s rule and reader), not a
second call of the action with the block size picked out of the file in Jinja.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.playbook_tasks import tasks

ROOT = Path(__file__).resolve().parents[2]
TASK_GLOBS = ("roles/*/tasks/*.yml", "roles/*/handlers/*.yml", "playbooks/*.yml", "site.yml")


def _files() -> list[Path]:
    return sorted({p for glob in TASK_GLOBS for p in ROOT.glob(glob)})


def test_ddtree_validate_is_called_by_one_task() -> None:
    callers = [
        f"{path.relative_to(ROOT)}: {task.get('name')}"
        for path in _files()
        for task in tasks(yaml.safe_load(path.read_text(encoding="utf-8")))
        if "ddtree.sglang.ddtree_validate" in task or "ddtree_validate" in task
    ]
    assert callers == ["roles/sglang_service/tasks/resolve.yml: Validate the service inputs and the speculative "
                       "settings (controller)"], callers


def test_no_task_reads_the_drafters_block_size_by_hand() -> None:
    # sglang reads dflash_config.block_size before a top-level block_size; spec_config.drafter_block_size does too.
    spelled = [str(p.relative_to(ROOT)) for p in _files() if "dflash_config" in p.read_text(encoding="utf-8")]
    assert spelled == [], spelled
    configure = (ROOT / "roles/sglang_service/tasks/configure.yml").read_text(encoding="utf-8")
    assert "ddtree.sglang.drafter_block_problems(" in configure
