#!/usr/bin/python3
"""Install the JIT compile check and find the unit whose sandbox it runs in, in one round trip (stdlib only).

Writes ``content`` to ``dest`` (root, 0755, its directory created 0755)
atomically when it differs, and says whether ``unit_path`` exists: the check
runs in that unit's sandbox, and on a first deploy there is none yet (the
check is then deferred until sglang_service has staged the unit).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: preflight_jit_install
short_description: Install the JIT compile check (when it differs) and say whether the unit exists
options:
  dest: {description: where the check is installed, type: path, required: true}
  content: {description: the check's source, type: str, required: true}
  unit_path: {description: the unit whose sandbox the check runs in, type: path, required: true}
author: [sglang-ddtree deploy]
"""


def install(module, dest, data):
    """Write ``data`` to ``dest`` (root, 0755) unless it is there already; True when it changed."""
    changed = not dest.is_file() or dest.read_bytes() != data
    if changed:
        dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        module.atomic_move(tmp, str(dest))  # Ansible's own rename into place
    changed = module.set_mode_if_different(str(dest), "0755", changed)
    changed = module.set_owner_if_different(str(dest), "root", changed)
    return module.set_group_if_different(str(dest), "root", changed)


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "content": {"type": "str", "required": True},
            "unit_path": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    dest = Path(p["dest"])
    data = p["content"].encode("utf-8")
    changed = (not dest.is_file() or dest.read_bytes() != data) if module.check_mode else install(module, dest, data)
    module.exit_json(changed=changed, dest=str(dest), unit_exists=Path(p["unit_path"]).is_file())


if __name__ == "__main__":
    main()
