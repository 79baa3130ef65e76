#!/usr/bin/python3
"""The host lease (rules in module_utils/sglang_lease.py; stdlib only).

On the host: ``state: acquired`` takes the lease or reports who holds it
(``acquired: false`` with the message; the play decides what follows), never
waiting; ``state: released`` gives it back if this lease id holds it.
On the controller (``delegate_to: localhost``): ``state: identity`` names the
run's controller process (the top-level ansible-playbook); ``state: alive``
says whether a holder's controller process still runs.
Check mode reports and changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_lease import acquire, alive, playbook_process, process_identity, release

DOCUMENTATION = r"""
module: sglang_host_lease
short_description: One sweep or deploy at a time on a host (a lease, no timer)
options:
  state: {description: what to do, type: str, default: acquired, choices: [acquired, released, identity, alive]}
  path: {description: the lease file (acquired/released), type: path}
  lease_id: {description: this run's lease id (acquired/released), type: str}
  holder: {description: 'the kind of run: "sweep <run id>" or "deploy"', type: str, default: deploy}
  who: {description: 'the holder''s controller identity (state identity''s result)', type: dict, default: {}}
  takeover: {description: take the lease whoever holds it, type: bool, default: false}
  takeover_if: {description: take it over only if this lease id still holds it, type: str, default: ''}
  pid: {description: controller PID to probe (alive), type: int}
  pid_start_time: {description: its start time (alive), type: int}
author: [sglang-ddtree deploy]
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "acquired", "choices": ["acquired", "released", "identity", "alive"]},
            "path": {"type": "path"},
            "lease_id": {"type": "str"},
            "holder": {"type": "str", "default": "deploy"},
            "who": {"type": "dict", "default": {}},
            "takeover": {"type": "bool", "default": False},
            "takeover_if": {"type": "str", "default": ""},
            "pid": {"type": "int"},
            "pid_start_time": {"type": "int"},
        },
        required_if=[
            ("state", "acquired", ("path", "lease_id")),
            ("state", "released", ("path", "lease_id")),
            ("state", "alive", ("pid",)),
        ],
        supports_check_mode=True,
    )
    p = module.params
    if p["state"] == "identity":
        module.exit_json(changed=False, who=process_identity(playbook_process(os.getpid())))
    if p["state"] == "alive":
        module.exit_json(changed=False, alive=alive(p["pid"], p["pid_start_time"]))
    path = Path(p["path"])
    if p["state"] == "released":
        module.exit_json(**release(path, p["lease_id"], check=module.check_mode))
    result = acquire(
        path,
        p["lease_id"],
        p["holder"],
        p["who"],
        takeover=p["takeover"],
        takeover_if=p["takeover_if"],
        check=module.check_mode,
    )
    if result.get("took_over") is not None:
        module.warn(result["msg"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
