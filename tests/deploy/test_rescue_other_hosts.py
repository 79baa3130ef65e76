"""A failure on one host of a play stops every host (``any_errors_fatal``), and Ansible runs the service block's
rescue on the others too, where nothing failed: no ``ansible_failed_task``, no ``ansible_failed_result``. The rescue's
first task (``roles/sglang_service/tasks/service.yml``, read from the role, not copied) must still keep a reason on
each host: the failing host its own, the others that the play stopped them. Found on the fleet: a refused port on
one of three hosts left the other two with "'ansible_failed_task' is undefined" instead of a reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

pytest.importorskip("ansible")

RESCUE_TASK = "Keep the failure reason and the journal excerpt"


def rescue_task() -> dict[str, object]:
    tasks = yaml.safe_load((ROOT / "roles/sglang_service/tasks/service.yml").read_text(encoding="utf-8"))
    blocks = [t for t in tasks if "rescue" in t]
    found = [t for b in blocks for t in b["rescue"] if t.get("name") == RESCUE_TASK]
    assert len(found) == 1, [b.get("name") for b in blocks]
    return found[0]


def test_the_hosts_a_failure_elsewhere_stopped_keep_a_reason_and_the_failing_host_its_own(tmp_path: Path) -> None:
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3"}
             for name in ("fleet-1", "fleet-2", "fleet-3")}  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}), encoding="utf-8")
    play = [{
        "name": "Three hosts, one refused",
        "hosts": "all",
        "gather_facts": False,
        "any_errors_fatal": True,
        "vars": {"_sglang_service_stopped": False},
        "tasks": [
            {"name": "The service block", "block": [
                {"name": "Check the port", "ansible.builtin.fail": {"msg": "port 31042 is held by another listener"},
                 "when": "inventory_hostname == 'fleet-2'"},
            ], "rescue": [rescue_task()]},
            {"name": "Show what each host kept", "ansible.builtin.debug": {"var": "_sglang_service_failure"}},
        ],
    }]  # fmt: skip
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
                          check=False, stdin=subprocess.DEVNULL)  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-4000:]  # every host rescued, none failed in the rescue
    shown = json.loads(proc.stdout)["plays"][0]["tasks"][-1]["hosts"]
    kept = {name: shown[name]["_sglang_service_failure"] for name in hosts}
    assert kept["fleet-2"]["reason"] == "port 31042 is held by another listener", kept
    assert kept["fleet-2"]["task"] == "Check the port", kept
    for name in ("fleet-1", "fleet-3"):
        assert kept[name]["task"] == "none on this host", kept
        assert "another host of it failed" in kept[name]["reason"] and "any_errors_fatal" in kept[name]["reason"], kept
        assert kept[name]["journal"] == [], kept
