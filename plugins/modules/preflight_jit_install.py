#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Install the JIT compile check and find the unit whose sandbox it runs in, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_jit_install
short_description: Install the JIT compile check (when it differs) and say whether the unit exists
description:
  - Writes O(content) to O(dest) (owner root, group root, mode 0755; its directory created 0755) atomically, and
    only when the file differs, then says whether O(unit_path) exists.
  - The check runs in that unit's sandbox; on a first deploy there is no unit yet, and the preflight role defers
    the check until the sglang_service role has staged it.
  - In check mode nothing is written; C(changed) says whether the file would change.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  dest: {description: Where the check is installed., type: path, required: true}
  content: {description: The check's source text., type: str, required: true}
  unit_path: {description: The unit file whose sandbox the check runs in., type: path, required: true}
"""

EXAMPLES = r"""
- name: Install the JIT compile check and look for the unit whose sandbox it runs in
  ddtree.sglang.preflight_jit_install:
    dest: /usr/local/libexec/sglang-deploy/jit_compile_check.py
    content: "{{ lookup('ansible.builtin.file', 'jit_compile_check.py', rstrip=false) }}"
    unit_path: /etc/systemd/system/sglang.service
  register: jit_unit
"""

RETURN = r"""
dest: {description: Where the check is installed., returned: always, type: str}
unit_exists: {description: Whether O(unit_path) is a file., returned: always, type: bool}
"""

import os
import tempfile
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


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
