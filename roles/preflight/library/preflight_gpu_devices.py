#!/usr/bin/python3
"""List the NVIDIA device nodes and the GPUs nvidia-smi lists, in one round trip (stdlib only).

``nodes``: every ``/dev/nvidia*`` entry, with whether it is a character
device; ``smi``: ``{rc, indices, stderr}`` from ``nvidia-smi
--query-gpu=index`` (rc 3: nvidia-smi is not installed). Changes nothing.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: preflight_gpu_devices
short_description: The /dev/nvidia* nodes and the GPU indices nvidia-smi lists
options:
  dev: {description: the device directory, type: path, default: /dev}
  nvidia_smi: {description: the nvidia-smi to run, type: str, default: nvidia-smi}
author: [sglang-ddtree deploy]
"""


def nodes(dev):
    out = []
    for entry in sorted(Path(dev).glob("nvidia*")):
        try:
            mode = entry.lstat().st_mode
        except OSError:
            continue
        out.append({"path": str(entry), "ischr": stat.S_ISCHR(mode)})
    return out


def smi_indices(smi_name):
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
