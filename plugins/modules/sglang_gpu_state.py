#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Refuse a start on GPUs that cannot take the server (stdlib only; the checks are module_utils/sglang_gpu.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_gpu_state
short_description: >-
  Refuse a start when the target GPUs are held by anything, or their compute/MIG mode would stop the server
description:
  - Reads C(nvidia-smi) for the target GPUs (memory used, compute mode, MIG mode; the compute processes) and fails,
    naming the GPU and the cause, when GPU memory is held by a process that is not one of O(unit)'s own (its cgroup
    PIDs; nothing else is allowed, whoever started it), when memory no listed process accounts for (another
    container's or VM's process, a leaked context) exceeds O(memory_used_max_mib), when the compute mode is not in
    O(compute_modes_allowed), or when MIG is enabled or pending (CUDA then sees MIG instances, not whole GPUs).
  - Used by the preflight role and by the restart chain before the running server is stopped; the wait until the
    GPUs are free after a stop is M(ddtree.sglang.sglang_stop_wait)'s, with the same checks.
  - Changes nothing; supports check mode.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  gpus: {description: The target GPU indices., type: list, elements: int, required: true}
  unit:
    description: "The systemd unit whose own processes may hold GPU memory (empty: none may)."
    type: str
    default: ""
  memory_used_max_mib:
    description: The memory in use per GPU that no allowed process accounts for, in MiB, above which it fails.
    type: int
    default: 1024
  compute_modes_allowed:
    description: The compute modes accepted (C(Prohibited) lets no process create a CUDA context).
    type: list
    elements: str
    default: [Default]
  required:
    description: Fail when nvidia-smi is not installed (otherwise the check is skipped and says why).
    type: bool
    default: false
  nvidia_smi: {description: The nvidia-smi to run (a name on PATH or a path)., type: str, default: nvidia-smi}
"""

EXAMPLES = r"""
- name: Check the target GPUs (memory held, compute mode, MIG)
  ddtree.sglang.sglang_gpu_state:
    gpus: [0, 1]
    unit: sglang
    required: true
  register: gpu_state
"""

RETURN = r"""
checked:
  description: Whether the GPUs were read (false when nvidia-smi is not installed).
  returned: success
  type: bool
skipped_reason: {description: Why they were not read., returned: when nvidia-smi is not installed, type: str}
gpus:
  description: The target GPUs as nvidia-smi lists them.
  returned: when the GPUs were read
  type: list
  elements: dict
  contains:
    index: {description: The GPU index., type: int, returned: always}
    uuid: {description: The GPU UUID., type: str, returned: always}
    name: {description: The product name., type: str, returned: always}
    memory_used_mib: {description: "Memory used, MiB (null: not reported).", type: int, returned: always}
    memory_total_mib: {description: "Memory total, MiB (null: not reported).", type: int, returned: always}
    compute_mode: {description: The compute mode., type: str, returned: always, sample: Default}
    mig_current: {description: The current MIG mode., type: str, returned: always}
    mig_pending: {description: The MIG mode at the next GPU reset., type: str, returned: always}
processes:
  description: "Every compute process nvidia-smi lists: pid, gpu_uuid, used_mib, process_name."
  returned: when the GPUs were read
  type: list
  elements: dict
unit_pids:
  description: "O(unit)'s PIDs, allowed to hold memory."
  returned: when the GPUs were read
  type: list
  elements: int
waited_s: {description: The seconds the read took., returned: when the GPUs were read, type: float}
problems: {description: Every reason the GPUs cannot take the server., returned: failure, type: list, elements: str}
"""

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_gpu import (
    SmiError,
    gpu_state,
    parse_apps,
    parse_gpus,
    problems_of,
)

#: The module's entry point and the nvidia-smi parsers and checks its result rests on (importable from here).
__all__ = ["main", "parse_apps", "parse_gpus", "problems_of"]


def main():
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "list", "elements": "int", "required": True},
            "unit": {"type": "str", "default": ""},
            "memory_used_max_mib": {"type": "int", "default": 1024},
            "compute_modes_allowed": {"type": "list", "elements": "str", "default": ["Default"]},
            "required": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    p = module.params
    smi = shutil.which(p["nvidia_smi"])
    if smi is None:
        if p["required"]:
            module.fail_json(msg=f"{p['nvidia_smi']} is not installed: the GPU state cannot be checked")
        module.exit_json(changed=False, checked=False, skipped_reason=f"no {p['nvidia_smi']} on this host")
    try:
        problems, details = gpu_state(
            smi,
            p["gpus"],
            unit=p["unit"],
            max_unattributed=p["memory_used_max_mib"],
            modes_allowed=p["compute_modes_allowed"],
        )
    except SmiError as exc:
        module.fail_json(msg=f"reading the GPU state failed: {exc}")
    if problems:
        module.fail_json(
            msg="the target GPUs cannot take the server: " + "; ".join(problems),
            problems=problems,
            **details,
        )
    module.exit_json(changed=False, checked=True, **details)


if __name__ == "__main__":
    main()
