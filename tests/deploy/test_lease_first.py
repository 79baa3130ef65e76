"""Every playbook that changes a host takes the host lease before anything on the host changes, and gives it back
however the play ends.

Before, site.yml took the lease inside sglang_service, after python_env and sglang_patches had changed the venv a
running sweep serves from, and reconfigure.yml after the version gate had installed the JIT check.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT

# The playbooks whose plays change a host (lease.yml is the lease itself; validate_inventory.yml and
# tool_values.yml run on the controller only).
CHANGING = ("site.yml", "reconfigure.yml", "collect.yml")


def _host_plays(name: str) -> list[dict[str, Any]]:
    plays = yaml.safe_load((ROOT / "playbooks" / name).read_text())
    return [p for p in plays if "hosts" in p and p.get("become")]


def _is_lease(task: dict[str, Any], tasks_from: str) -> bool:
    role = task.get("ansible.builtin.import_role") or task.get("ansible.builtin.include_role") or {}
    return role.get("name") == "ddtree.sglang.sglang_service" and role.get("tasks_from") == tasks_from


@pytest.mark.parametrize("name", CHANGING)
def test_the_lease_is_the_first_task_on_the_host_and_always_given_back(name: str) -> None:
    plays = _host_plays(name)
    assert plays, f"{name} has no play on the hosts"
    for play in plays:
        assert not play.get("pre_tasks") and not play.get("roles"), f"{name}: host work outside the leased block"
        tasks = play["tasks"]
        assert len(tasks) == 1 and "block" in tasks[0], f"{name}: the play's work is not one block under the lease"
        block = tasks[0]
        assert _is_lease(block["block"][0], "lease"), f"{name}: the first task is {block['block'][0].get('name')}"
        assert any(_is_lease(t, "lease_release") for t in block.get("always", [])), f"{name}: no release"


def test_site_yml_installs_nothing_before_the_lease() -> None:
    """The order as ansible-playbook lists it: validation (controller) first, then the lease, then the roles."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/ct200", "site.yml", "--list-tasks"],
        cwd=ROOT, capture_output=True, text=True, check=True, env={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                                                    "PATH": str(Path(sys.executable).parent)},
    ).stdout  # fmt: skip
    play = out.split("play #2")[1]
    tasks = [line.strip() for line in play.splitlines() if "TAGS:" in line and not line.strip().startswith("(all)")]
    role = "ddtree.sglang.sglang_service :"
    # the shared defaults' and the lease entry point's argument specs are checked first (on the controller), then
    # the lease is taken
    shared = "ddtree.sglang.ddtree_defaults : Validating arguments against arg spec 'main'"
    assert tasks[0].startswith(shared), tasks[:3]
    assert tasks[1].startswith(f"{role} Validating arguments against arg spec 'lease'"), tasks[:3]
    assert tasks[2].startswith(f"{role} Name this run's controller process, the lease holder"), tasks[:3]
    lease_at = next(i for i, t in enumerate(tasks) if t.startswith(f"{role} Take the host lease"))
    before = tasks[1:lease_at]
    assert all(t.startswith(role) for t in before), before
    assert any(t.startswith("ddtree.sglang.python_env :") for t in tasks[lease_at:])
