#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Read small host files and look for executables, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_read
short_description: Read small text files and look for executables on the host in one call
description:
  - "Reads each file of O(files) as UTF-8 text (RV(content); C(null) when it cannot be read, with the reason in
    RV(errors)), says whether each path of O(executables) is an executable file and whether each path of O(paths)
    exists, in one round trip."
  - Used for the host setup's stamp, the drafter's config.json, nvidia-modprobe, a staged keys file and the patch
    series' state file. Changes nothing; supports check mode.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  files: {description: "Name -> path of a text file to read (at most O(max_bytes)).", type: dict, default: {}}
  executables: {description: "Name -> path; whether it is an executable file.", type: dict, default: {}}
  paths: {description: "Name -> path; whether it exists (a dangling link counts).", type: dict, default: {}}
  max_bytes: {description: The largest file read; a larger one is an error., type: int, default: 1048576}
"""

EXAMPLES = r"""
- name: Read the patch series' state file
  ddtree.sglang.sglang_host_read:
    files:
      state: /var/lib/sglang-deploy/sglang-patches.state.json
  register: state_read

- name: Read the drafter's config.json, look for nvidia-modprobe and the staged keys
  ddtree.sglang.sglang_host_read:
    files: {drafter_config: /models/drafter/config.json}
    executables: {nvidia_modprobe: /usr/bin/nvidia-modprobe}
    paths: {staged_keys: /var/lib/sglang-deploy/staged/sglang.keys.json}
  register: host
"""

RETURN = r"""
content: {description: "Name -> the file's text (null: not read).", returned: always, type: dict}
errors: {description: Name -> why the file was not read (only the files not read)., returned: always, type: dict}
executable: {description: Name -> whether the path is an executable file., returned: always, type: dict}
exists: {description: Name -> whether the path exists., returned: always, type: dict}
"""

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule


def read_text(path, max_bytes):
    """``(text, None)`` or ``(None, why)``."""
    try:
        size = Path(path).stat().st_size
        if size > max_bytes:
            return None, f"{path} is {size} bytes, more than {max_bytes}"
        return Path(path).read_text(encoding="utf-8"), None
    except FileNotFoundError:
        return None, f"file not found: {path}"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read {path}: {exc}"


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "dict", "default": {}},
            "executables": {"type": "dict", "default": {}},
            "paths": {"type": "dict", "default": {}},
            "max_bytes": {"type": "int", "default": 1048576},
        },
        supports_check_mode=True,
    )
    p = module.params
    content, errors = {}, {}
    for name, path in p["files"].items():
        content[name], why = read_text(str(path), p["max_bytes"])
        if why:
            errors[name] = why
    executable = {}
    for name, path in p["executables"].items():
        executable[name] = Path(path).is_file() and os.access(str(path), os.X_OK)
    exists = {name: os.path.lexists(str(path)) for name, path in p["paths"].items()}
    module.exit_json(changed=False, content=content, errors=errors, executable=executable, exists=exists)


if __name__ == "__main__":
    main()
