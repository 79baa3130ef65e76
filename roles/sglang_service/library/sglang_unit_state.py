#!/usr/bin/python3
"""Read what the restart decision needs, in one round trip (stdlib only).

The unit's state (ActiveState, SubState, MainPID, InvocationID), the sha256 of
each file the running server depends on (the installed and the staged unit
and keys, the patch state; ``none`` for a file that does not exist) and the
record of the last successful deploy (``{}`` when there is none, or when it
cannot be parsed: the restart decision then restarts). With ``precheck`` (the
new config's port, bind address, files, GPUs) also ``problems``: every reason
the new config cannot start now, read while the old server still serves
(module_utils/sglang_precheck.py); the role refuses a restart that has any.
Changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_files import sha256_of
from ansible.module_utils.sglang_host import unit_show
from ansible.module_utils.sglang_precheck import PRECHECK_SPEC, problems

DOCUMENTATION = r"""
module: sglang_unit_state
short_description: The unit's state, the fingerprints of its files and the last deploy's record, in one call
options:
  unit: {description: systemd unit name, type: str, required: true}
  files: {description: "name -> path; the sha256 of each (none: absent)", type: dict, default: {}}
  record_path: {description: the JSON record of the last successful deploy, type: path, required: true}
  precheck:
    description: "the new config (port, host, files, gpus, gpu_required, gpu_memory_used_max_mib,
      gpu_compute_modes_allowed, nvidia_smi): return the problems that stop it from starting"
    type: dict
author: [sglang-ddtree deploy]
"""

STATE_PROPS = ("ActiveState", "SubState", "MainPID", "InvocationID")


def read_record(path):
    """The record as a dict; ``{}`` when it is absent or not a JSON object (pure but for the read)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "files": {"type": "dict", "default": {}},
            "record_path": {"type": "path", "required": True},
            "precheck": {"type": "dict", "options": PRECHECK_SPEC},
        },
        supports_check_mode=True,
    )
    p = module.params
    shown = unit_show(p["unit"], STATE_PROPS)
    found, details = problems(p["unit"], p["precheck"]) if p["precheck"] else ([], {})
    module.exit_json(
        changed=False,
        problems=found,
        precheck=details,
        state={prop: shown.get(prop, "") for prop in STATE_PROPS},
        sha256={name: sha256_of(path) for name, path in p["files"].items()},
        record=read_record(p["record_path"]),
    )


if __name__ == "__main__":
    main()
