#!/usr/bin/python3
"""Record a successful deploy, in one round trip (stdlib only).

Keeps the installed unit and its keys as the last good ones (a later failed
config rolls back to them), forgets last good keys the unit no longer uses,
and writes the record the rollback reads (port, probe address, expected
echo, sampling, fingerprint) as JSON. Every write is atomic. Returns the
installed unit's sha256 for the deploy report. Key contents never appear in
the result.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_files import copy_file, remove_file, sha256_of, write_file

DOCUMENTATION = r"""
module: sglang_deploy_record
short_description: Keep the unit and keys as the last good ones and write the deploy record
options:
  name: {description: the service name (file names in last_good_dir), type: str, required: true}
  unit_path: {description: the installed unit, type: path, required: true}
  keys_path: {description: the installed keys (absent when the unit uses none), type: path, required: true}
  keys_group: {description: the group that reads the keys, type: str, required: true}
  last_good_dir: {description: where the last good unit and keys are kept, type: path, required: true}
  record: {description: the record of this deploy, type: dict, required: true}
  record_path: {description: where the record is written (JSON), type: path, required: true}
author: [sglang-ddtree deploy]
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "unit_path": {"type": "path", "required": True},
            "keys_path": {"type": "path", "required": True},
            "keys_group": {"type": "str", "required": True},
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
