#!/usr/bin/python3
"""Put a unit and its keys in place and (re)start it, in one round trip (stdlib only).

Runs only while the server is stopped (the restart chain, the rollback):

1. the unit file (root, 0644) and the keys file (root:GROUP, 0640) are
   copied from the staged (or last good) ones, atomically; keys the new unit
   does not use are removed;
2. ``systemctl daemon-reload``; the unit is enabled at boot;
3. ``systemctl reset-failed`` (a deliberate start: since
   systemd 255 the start-limit counter survives daemon-reload, so without it
   the 4th deploy, reconfigure or rollback within StartLimitIntervalSec is
   refused; automatic restarts are not reset, a crash loop still stops), then
   ``systemctl start --no-block`` (the start job is queued and the readiness
   wait watches it, so a failure anywhere is reported with the journal lines
   of this invocation).

Key contents never appear in the result.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_files import copy_file, remove_file

DOCUMENTATION = r"""
module: sglang_unit_install
short_description: Install a unit and its keys, reload systemd, enable, reset the start limit and queue the start
options:
  unit: {description: systemd unit name, type: str, required: true}
  unit_src: {description: the unit to install (staged or last good), type: path, required: true}
  unit_dest: {description: the installed unit file, type: path, required: true}
  keys_src: {description: the keys to install; absent means the unit uses none, type: path, required: true}
  keys_dest: {description: the installed keys file, type: path, required: true}
  keys_group: {description: the group that reads the keys (the service group), type: str, required: true}
author: [sglang-ddtree deploy]
"""


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
            "keys_group": {"type": "str", "required": True},
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
