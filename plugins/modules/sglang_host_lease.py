#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""The host lease: one sweep or deploy at a time on a host (rules in module_utils/sglang_lease.py; stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_lease
short_description: One sweep or deploy at a time on a host (a lease, no timer)
description:
  - "On the host: O(state=acquired) takes the lease (a JSON file at O(path), decided under an exclusive flock and
    replaced atomically) or reports who holds it (RV(acquired) false with the message; the play decides what
    follows), never waiting; O(state=released) gives it back if O(lease_id) holds it."
  - "On the controller (C(delegate_to: localhost)): O(state=identity) names the run's controller process (the
    top-level ansible-playbook); O(state=alive) says whether a holder's controller process still runs."
  - A lease has no timer. It changes hands only when the host rebooted since it was taken, on request
    (O(takeover)), or when the caller found the holder's process gone and asks for that very lease
    (O(takeover_if), a compare-and-swap).
  - Check mode reports and changes nothing.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  state:
    description: What to do.
    type: str
    default: acquired
    choices: [acquired, released, identity, alive]
  path: {description: "The lease file (O(state=acquired) and O(state=released): required).", type: path}
  lease_id: {description: "This run's lease id (O(state=acquired) and O(state=released): required).", type: str}
  holder: {description: "The kind of run: C(sweep <run id>) or C(deploy).", type: str, default: deploy}
  who: {description: "The holder's controller identity (RV(who) of O(state=identity)).", type: dict, default: {}}
  takeover: {description: Take the lease whoever holds it., type: bool, default: false}
  takeover_if:
    description: "Take it over only if this lease id still holds it (empty: no such condition)."
    type: str
    default: ""
  pid: {description: "The controller PID to probe (O(state=alive): required).", type: int}
  pid_start_time: {description: "Its start time, field 22 of C(/proc/<pid>/stat) (O(state=alive)).", type: int}
"""

EXAMPLES = r"""
- name: Name this run's controller process, the lease holder
  ddtree.sglang.sglang_host_lease:
    state: identity
  delegate_to: localhost
  register: me

- name: Take the host lease
  ddtree.sglang.sglang_host_lease:
    path: /run/sglang-deploy/host.lease
    lease_id: "{{ lease_id }}"
    holder: deploy
    who: "{{ me.who }}"
  register: lease

- name: Give the host lease back
  ddtree.sglang.sglang_host_lease:
    state: released
    path: /run/sglang-deploy/host.lease
    lease_id: "{{ lease_id }}"
"""

RETURN = r"""
who:
  description: "The controller process: controller_host, controller_boot_id, pid, pid_start_time, user, command."
  returned: when state=identity
  type: dict
alive:
  description: "Whether the process still runs and is the same one (unknown start time: true)."
  returned: when state=alive
  type: bool
acquired: {description: Whether this lease id holds the lease now., returned: when state=acquired, type: bool}
lease: {description: The lease held (as written to O(path))., returned: when acquired, type: dict}
holder: {description: The lease of the run that holds it., returned: when refused, type: dict}
took_over: {description: The lease that was taken over., returned: when taken over, type: dict}
released: {description: Whether the lease was given back., returned: when state=released, type: bool}
msg: {description: What was done and why., returned: when state=acquired or state=released, type: str}
"""

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_lease import (
    acquire,
    alive,
    playbook_process,
    process_identity,
    release,
)


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
