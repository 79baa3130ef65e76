#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Read what the restart decision needs, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_unit_state
short_description: The unit's state, the fingerprints of its files and the last deploy's record, in one call
description:
  - "Reads the unit's ActiveState, SubState, MainPID and InvocationID, the sha256 of each file the running server
    depends on (the installed and the staged unit and keys, the patch state; C(none) for a file that does not
    exist) and the record of the last successful deploy (C({}) when there is none or it cannot be parsed: the
    restart decision then restarts)."
  - With O(precheck) (the new config) also RV(problems), every reason the new config cannot start now, read while
    the old server still serves; the role refuses a restart that has any. The port is checked for a listener that
    is not one of the unit's own processes, the bind address for being one of this host's, the files for
    existing, the target GPUs as M(ddtree.sglang.sglang_gpu_state) checks them (the unit's own processes may hold
    memory), and the attention backend against the GPUs' compute capability.
  - Changes nothing; supports check mode.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  unit: {description: The systemd unit name., type: str, required: true}
  files: {description: "Name -> path; the sha256 of each (C(none): absent).", type: dict, default: {}}
  record_path: {description: The JSON record of the last successful deploy., type: path, required: true}
  precheck:
    description: The new config; return the problems that stop it from starting now.
    type: dict
    suboptions:
      port: {description: The port the new server binds., type: int, required: true}
      host: {description: "The bind address (C(0.0.0.0), C(::) or empty: any).", type: str, default: 127.0.0.1}
      files: {description: Path -> what needs it; each must exist., type: dict, default: {}}
      gpus: {description: "The target GPU indices (empty: no GPU check).", type: list, elements: int, default: []}
      gpu_required:
        description: A missing nvidia-smi is a problem (otherwise the GPU check is skipped).
        type: bool
        default: false
      gpu_memory_used_max_mib:
        description: The memory in use per GPU that no allowed process accounts for (MiB) above which it is a problem.
        type: int
        default: 1024
      gpu_compute_modes_allowed:
        description: The compute modes accepted.
        type: list
        elements: str
        default: [Default]
      nvidia_smi: {description: The nvidia-smi to run (a name on PATH or a path)., type: str, default: nvidia-smi}
      attention_backend:
        description: "The attention backend to check against the GPUs' compute capability (empty: not checked)."
        type: str
        default: ""
      attention_backend_choices:
        description: The attention backends sglang accepts (C(attention_backends) of M(ddtree.sglang.ddtree_validate)).
        type: list
        elements: str
        default: []
"""

EXAMPLES = r"""
- name: Read the unit's state, the fingerprints and the last deploy's record, and pre-check the new config
  ddtree.sglang.sglang_unit_state:
    unit: sglang
    files:
      installed_unit: /etc/systemd/system/sglang.service
      staged_unit: /var/lib/sglang-deploy/staged/sglang.service
    record_path: /var/lib/sglang-deploy/sglang.deployed.json
    precheck:
      port: 30001
      host: 127.0.0.1
      files: {/models/target/config.json: the target model}
      gpus: [0]
  register: now
"""

RETURN = r"""
state:
  description: The unit's ActiveState, SubState, MainPID and InvocationID (empty when systemd does not say).
  returned: always
  type: dict
sha256: {description: "Name -> the file's sha256 (C(none): absent).", returned: always, type: dict}
record: {description: "The last successful deploy's record (C({}): none).", returned: always, type: dict}
problems:
  description: Every reason the new config cannot start now (empty without O(precheck)).
  returned: always
  type: list
  elements: str
precheck:
  description: >-
    What the pre-check read (C({}) without O(precheck)): unit_pids, listeners, port_held_by_unit and, with
    O(precheck.gpus), gpu_checked, gpu_skipped_reason or gpus, processes and compute_caps.
  returned: always
  type: dict
"""

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_files import sha256_of
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host import unit_show
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_precheck import PRECHECK_SPEC, problems

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
