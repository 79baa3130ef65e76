#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Record a successful deploy, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_deploy_record
short_description: Keep the unit and keys as the last good ones and write the deploy record
description:
  - Copies the installed unit (mode 0644) and its keys (root:O(keys_group), mode 0640) into O(last_good_dir) as
    C(<name>.service) and C(<name>.keys.json), the ones a later failed config rolls back to; a last good keys file
    the unit no longer uses (O(keys_path) absent) is removed.
  - Writes O(record) (port, probe address, expected echo, fingerprint) to O(record_path) as JSON, read by the
    rollback and the restart decision.
  - Every write is atomic and happens only when the content, mode or owner differs. Key contents never appear in
    the result. Check mode is not supported.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  name: {description: "The service name (the file names in O(last_good_dir)).", type: str, required: true}
  unit_path: {description: The installed unit file., type: path, required: true}
  keys_path: {description: The installed keys file (absent when the unit uses none)., type: path, required: true}
  keys_group: {description: The group that reads the keys (a group name; no secret)., type: str, required: true}
  last_good_dir: {description: Where the last good unit and keys are kept., type: path, required: true}
  record: {description: The record of this deploy., type: dict, required: true}
  record_path: {description: Where the record is written (JSON)., type: path, required: true}
"""

EXAMPLES = r"""
- name: Keep this unit and its keys as the last good ones and record the successful deploy
  ddtree.sglang.sglang_deploy_record:
    name: sglang
    unit_path: /etc/systemd/system/sglang.service
    keys_path: /etc/sglang/sglang.keys.json
    keys_group: sglang
    last_good_dir: /var/lib/sglang-deploy/last-good
    record_path: /var/lib/sglang-deploy/sglang.deployed.json
    record:
      fingerprint: "{{ fingerprint }}"
      port: 30001
      probe_host: 127.0.0.1
      expect: "{{ expected_echo }}"
"""

RETURN = r"""
unit_sha256: {description: The installed unit's sha256 (for the deploy report)., returned: success, type: str}
"""

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_files import (
    copy_file,
    remove_file,
    sha256_of,
    write_file,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "unit_path": {"type": "path", "required": True},
            "keys_path": {"type": "path", "required": True},
            "keys_group": {"type": "str", "required": True, "no_log": False},
            "last_good_dir": {"type": "path", "required": True},
            "record": {"type": "dict", "required": True},
            "record_path": {"type": "path", "required": True},
        },
        supports_check_mode=False,
    )
    p = module.params
    good = Path(p["last_good_dir"])
    changed = copy_file(p["unit_path"], good / f"{p['name']}.service", 0o644)
    good_keys = good / f"{p['name']}.keys.json"
    if Path(p["keys_path"]).is_file():
        changed |= copy_file(p["keys_path"], good_keys, 0o640, "root", p["keys_group"])
    else:
        changed |= remove_file(good_keys)
    text = json.dumps(p["record"], indent=4, sort_keys=True) + "\n"
    changed |= write_file(p["record_path"], text.encode("utf-8"), 0o644)
    module.exit_json(changed=changed, unit_sha256=sha256_of(p["unit_path"]))


if __name__ == "__main__":
    main()
