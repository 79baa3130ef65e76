#!/usr/bin/python3
"""Read small host files and look for executables, in one round trip (stdlib only).

``files``: name -> path; each is returned as text in ``content`` (``None``
when it cannot be read, with the reason in ``errors``). ``executables``:
name -> path; ``executable`` says whether each is an executable file.
``paths``: name -> path; ``exists`` says whether each exists. Used for the
host setup's stamp, the drafter's config.json, nvidia-modprobe and a staged
keys file. Changes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_host_read
short_description: Read small text files and look for executables on the host in one call
options:
  files: {description: "name -> path of a text file to read (at most max_bytes)", type: dict, default: {}}
  executables: {description: "name -> path; whether it is an executable file", type: dict, default: {}}
  paths: {description: "name -> path; whether it exists", type: dict, default: {}}
  max_bytes: {description: the largest file read, type: int, default: 1048576}
author: [sglang-ddtree deploy]
"""


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
