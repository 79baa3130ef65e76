#!/usr/bin/python3
"""Refuse a start on GPUs that cannot take the server (stdlib only).

Reads ``nvidia-smi`` (per GPU: memory used, compute mode, MIG mode; the
compute processes) for the target GPUs and fails, naming the GPU and the
cause, when:

- GPU memory is held by any process that is not the unit's own (``unit``:
  its cgroup PIDs are allowed; nothing else is, whoever started it);
- memory is in use that no listed process accounts for (another container's
  or VM's process, a leaked context) beyond ``memory_used_max_mib``;
- the compute mode is not in ``compute_modes_allowed`` (``Prohibited`` lets
  no process create a CUDA context; ``Exclusive_Process`` lets one process
  per GPU, so anything else holding a context stops the server);
- MIG is enabled, or pending (enabled at the next GPU reset): CUDA then sees
  MIG instances, not the whole GPUs the server is sized for.

Used by the preflight role (early) and by the restart chain (before the
running server is stopped). The wait until the GPUs are free after a stop
is sglang_stop_wait's (``gpus``), with the same checks (module_utils/sglang_gpu.py).
"""

from __future__ import annotations

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_gpu import (  # noqa: F401 (parse_*, problems_of: unit-tested through here)
    SmiError,
    gpu_state,
    parse_apps,
    parse_gpus,
    problems_of,
)

DOCUMENTATION = r"""
module: sglang_gpu_state
short_description: >-
  Refuse a start when the target GPUs are held by anything, or their compute/MIG mode would stop the server
options:
  gpus: {description: target GPU indices, type: list, elements: int, required: true}
  unit: {description: systemd unit whose own processes may hold GPU memory, type: str, default: ""}
  memory_used_max_mib:
    description: memory in use that no allowed process accounts for, per GPU
    type: int
    default: 1024
  compute_modes_allowed: {description: compute modes accepted, type: list, elements: str, default: [Default]}
  required: {description: fail when nvidia-smi is missing (otherwise report skipped), type: bool, default: false}
  nvidia_smi: {description: the nvidia-smi to run, type: str, default: nvidia-smi}
author: [sglang-ddtree deploy]
"""


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
