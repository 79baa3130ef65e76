#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""List the NVIDIA device nodes and the GPUs nvidia-smi lists, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_gpu_devices
short_description: The /dev/nvidia* nodes and the GPU indices nvidia-smi lists
description:
  - Lists every C(nvidia*) entry of O(dev), saying whether each is a character device, and the GPU indices
    C(nvidia-smi --query-gpu=index) lists, in one round trip. The preflight role derives from them the device
    nodes the server's unit opens.
  - When O(nvidia_smi) is not installed, RV(smi.rc) is 3 and no index is listed; any other non-zero exit of
    nvidia-smi fails the task, with its stderr.
  - Changes nothing; supports check mode.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  dev: {description: The directory the C(nvidia*) device nodes are listed from., type: path, default: /dev}
  nvidia_smi: {description: The nvidia-smi to run (a name on PATH or a path)., type: str, default: nvidia-smi}
"""

EXAMPLES = r"""
- name: Find the NVIDIA device nodes and the GPUs nvidia-smi lists
  ddtree.sglang.preflight_gpu_devices:
  register: found

- name: Show the character devices
  ansible.builtin.debug:
    msg: "{{ found.nodes | selectattr('ischr') | map(attribute='path') | list }}"
"""

RETURN = r"""
nodes:
  description: Every C(nvidia*) entry of O(dev), sorted by path (an entry that vanished while read is left out).
  returned: success
  type: list
  elements: dict
  contains:
    path: {description: The entry's path., type: str, returned: always, sample: /dev/nvidia0}
    ischr: {description: Whether it is a character device., type: bool, returned: always}
smi:
  description: What C(nvidia-smi --query-gpu=index --format=csv,noheader) said.
  returned: always
  type: dict
  contains:
    rc: {description: "Its exit status (3: nvidia-smi is not installed).", type: int, returned: always}
    indices: {description: The GPU indices it listed (only when rc is 0)., type: list, elements: str, returned: always}
    stderr: {description: "Its stderr, or why it was not run.", type: str, returned: always}
"""

import shutil
import stat
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def nodes(dev):
    """Every ``nvidia*`` entry of ``dev`` as ``{path, ischr}``, sorted by path."""
    out = []
    for entry in sorted(Path(dev).glob("nvidia*")):
        try:
            mode = entry.lstat().st_mode
        except OSError:
            continue
        out.append({"path": str(entry), "ischr": stat.S_ISCHR(mode)})
    return out


def smi_indices(smi_name):
    """``{rc, indices, stderr}`` of ``nvidia-smi --query-gpu=index`` (rc 3 when it is not installed)."""
    smi = shutil.which(smi_name)
    if smi is None:
        return {"rc": 3, "indices": [], "stderr": f"{smi_name} is not installed"}
    res = subprocess.run(
        [smi, "--query-gpu=index", "--format=csv,noheader"], check=False, capture_output=True, text=True, timeout=120
    )
    lines = res.stdout.splitlines() if res.returncode == 0 else []
    indices = [line.strip() for line in lines if line.strip().isdigit()]
    return {"rc": res.returncode, "indices": indices, "stderr": res.stderr.strip()}


def main():
    module = AnsibleModule(
        argument_spec={
            "dev": {"type": "path", "default": "/dev"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    p = module.params
    smi = smi_indices(p["nvidia_smi"])
    if smi["rc"] not in (0, 3):
        module.fail_json(msg=f"{p['nvidia_smi']} --query-gpu=index failed (exit {smi['rc']}): {smi['stderr']}", smi=smi)
    module.exit_json(changed=False, nodes=nodes(p["dev"]), smi=smi)


if __name__ == "__main__":
    main()
