#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Put a unit and its keys in place and (re)start it, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_unit_install
short_description: Install a unit and its keys, reload systemd, enable, reset the start limit and queue the start
description:
  - Runs only while the server is stopped (the restart chain, the rollback), in one round trip.
  - Copies O(unit_src) to O(unit_dest) (root, 0644) and O(keys_src) to O(keys_dest) (root:O(keys_group), 0640),
    atomically; when O(keys_src) does not exist, the unit uses no keys and O(keys_dest) is removed.
  - Runs C(systemctl daemon-reload) and enables the unit at boot.
  - "Runs C(systemctl reset-failed) before this deliberate start: since systemd 255 the start-limit counter survives
    daemon-reload, so without it a fourth deploy, reconfigure or rollback within StartLimitIntervalSec would be
    refused (automatic restarts are not reset: a crash loop still stops)."
  - Queues the start (C(systemctl start --no-block)); M(ddtree.sglang.sglang_wait_ready) watches it.
  - Key contents never appear in the result. Always reports changed; check mode is not supported.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  unit: {description: The systemd unit name., type: str, required: true}
  unit_src: {description: The unit file to install (staged or last good)., type: path, required: true}
  unit_dest: {description: The installed unit file., type: path, required: true}
  keys_src: {description: "The keys file to install (absent: the unit uses none).", type: path, required: true}
  keys_dest: {description: The installed keys file., type: path, required: true}
  keys_group:
    description: The group that reads the keys, the service group (a group name; no secret).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Install the staged unit and keys, reload systemd, reset the start limit and queue the start
  ddtree.sglang.sglang_unit_install:
    unit: sglang
    unit_src: /var/lib/sglang-deploy/staged/sglang.service
    unit_dest: /etc/systemd/system/sglang.service
    keys_src: /var/lib/sglang-deploy/staged/sglang.keys.json
    keys_dest: /etc/sglang/sglang.keys.json
    keys_group: sglang
"""

RETURN = r"""
unit_changed: {description: Whether the installed unit file changed., returned: success, type: bool}
keys:
  description: What happened to the keys file.
  returned: success
  type: str
  choices: [installed, unchanged, removed, none]
enabled_before:
  description: What C(systemctl is-enabled) said before, such as C(enabled) or C(disabled).
  returned: success
  type: str
"""

import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_files import copy_file, remove_file


def systemctl(module, *args, fail=True):
    res = subprocess.run(["systemctl", *args], check=False, capture_output=True, text=True)
    if fail and res.returncode != 0:
        module.fail_json(msg=f"systemctl {' '.join(args)} failed (exit {res.returncode}): {res.stderr.strip()}")
    return res


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "unit_src": {"type": "path", "required": True},
            "unit_dest": {"type": "path", "required": True},
            "keys_src": {"type": "path", "required": True},
            "keys_dest": {"type": "path", "required": True},
            "keys_group": {"type": "str", "required": True, "no_log": False},
        },
        supports_check_mode=False,
    )
    p = module.params
    if not Path(p["unit_src"]).is_file():
        module.fail_json(msg=f"{p['unit_src']} does not exist: there is no unit to install")
    unit_changed = copy_file(p["unit_src"], p["unit_dest"], 0o644)
    if Path(p["keys_src"]).is_file():
        keys = "installed" if copy_file(p["keys_src"], p["keys_dest"], 0o640, "root", p["keys_group"]) else "unchanged"
    else:
        keys = "removed" if remove_file(p["keys_dest"]) else "none"
    systemctl(module, "daemon-reload")
    enabled = systemctl(module, "is-enabled", p["unit"], fail=False).stdout.strip()
    if enabled != "enabled":
        systemctl(module, "enable", p["unit"])
    systemctl(module, "reset-failed", p["unit"], fail=False)  # nothing to reset is not an error
    systemctl(module, "start", "--no-block", p["unit"])
    module.exit_json(changed=True, unit_changed=unit_changed, keys=keys, enabled_before=enabled)


if __name__ == "__main__":
    main()
