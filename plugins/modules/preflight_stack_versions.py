#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Read the versions the version gate compares with the pins, in one round trip (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: preflight_stack_versions
short_description: nvcc's release, sglang's version, torch's CUDA and the JIT toolchain, in one call
description:
  - Reads what the preflight role's version gate compares with the pins, each as RV(sglang.rc)/C(stdout)/C(stderr)
    (rc 0 read, otherwise stderr says why), so the gate names exactly what it found. Changes nothing.
  - C(nvcc --version) of O(cuda_home), when it is set (or found in the local facts, see O(local_facts_dir)).
  - The installed sglang distribution's version, torch's C(torch.version.cuda) (with O(torch)) and what the JITs
    compile with (with O(toolchain)), all read by one run of O(venv_python).
  - With O(local_facts_dir) (a play that gathers no facts) it also returns the host's local facts as
    C(ansible_local), every C(*.fact) file there read as JSON or INI as the setup module reads them (executable
    facts are not run); an empty O(cuda_home) is then the cuda_toolkit fact's C(toolkit.cuda_home).
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  cuda_home:
    description: "The CUDA toolkit whose C(bin/nvcc) is read (empty: nvcc is not read)."
    type: str
    default: ""
  venv_python: {description: The server venv's interpreter., type: path, required: true}
  torch: {description: "Whether to import torch and read C(torch.version.cuda).", type: bool, default: true}
  toolchain:
    description: Whether to look for gcc, c++, the interpreter's C(Python.h) and ninja.
    type: bool
    default: true
  local_facts_dir:
    description: "Read the local facts in this directory and return them as C(ansible_local) (empty: none read)."
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Read nvcc's release, sglang's version, torch's CUDA and the JIT toolchain
  ddtree.sglang.preflight_stack_versions:
    cuda_home: /usr/local/cuda-13.0
    venv_python: /opt/sglang/venv/bin/python
    local_facts_dir: "{{ '' if ansible_local is defined else '/etc/ansible/facts.d' }}"
  register: stack

- name: Show sglang's version
  ansible.builtin.debug:
    msg: "{{ stack.sglang.stdout if stack.sglang.rc == 0 else stack.sglang.stderr }}"
"""

RETURN = r"""
cuda_home: {description: The toolkit nvcc was read from., returned: when a CUDA home is known, type: str}
nvcc:
  description: "C(nvcc --version): rc, stdout, stderr and stdout_lines (rc 127: it could not run)."
  returned: when a CUDA home is known
  type: dict
sglang:
  description: "The installed sglang's version: rc (0: read), stdout (the version), stderr (why not)."
  returned: always
  type: dict
  contains:
    rc: {description: 0 when read., type: int, returned: always}
    stdout: {description: The value read., type: str, returned: always}
    stderr: {description: Why it was not read., type: str, returned: always}
torch:
  description: C(torch.version.cuda), as RV(sglang) (an import failure in stderr).
  returned: when O(torch) is true
  type: dict
toolchain:
  description: >-
    As RV(sglang); stdout is a JSON object of the paths of C(gcc), C(c++), C(Python.h), C(ninja) (null: not found)
    and the interpreter's C(include) directory.
  returned: when O(toolchain) is true
  type: dict
ansible_facts:
  description: The host's local facts.
  returned: when O(local_facts_dir) is set
  type: dict
  contains:
    ansible_local:
      description: "Each C(*.fact) file's value by name (one that cannot be read: an error string)."
      type: dict
      returned: always
"""

import configparser
import json
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

# Runs in the venv's interpreter: one JSON object, one entry per read.
VENV_PROBE = r"""
import json, os, shutil, sys, sysconfig
want_torch, want_toolchain = sys.argv[1] == "1", sys.argv[2] == "1"
out = {}
try:
    import importlib.metadata as m
    out["sglang"] = {"rc": 0, "stdout": m.version("sglang"), "stderr": ""}
except Exception as exc:
    out["sglang"] = {"rc": 1, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}
if want_torch:
    try:
        import torch
        out["torch"] = {"rc": 0, "stdout": str(torch.version.cuda), "stderr": ""}
    except Exception as exc:
        out["torch"] = {"rc": 1, "stdout": "", "stderr": f"{type(exc).__name__}: {exc}"}
if want_toolchain:
    inc = sysconfig.get_paths()["include"]
    header = os.path.join(inc, "Python.h")
    found = {
        "gcc": shutil.which("gcc"),
        "c++": shutil.which("c++"),
        "Python.h": header if os.path.isfile(header) else None,
        "ninja": shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")),
        "include": inc,
    }
    out["toolchain"] = {"rc": 0, "stdout": json.dumps(found), "stderr": ""}
print(json.dumps(out))
"""


def run(argv):
    try:
        res = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr}


def venv_reads(python, torch, toolchain):
    """The venv interpreter's reads; when it cannot run at all, each read says so (rc != 0)."""
    wanted = ["sglang"] + (["torch"] if torch else []) + (["toolchain"] if toolchain else [])
    res = run([python, "-c", VENV_PROBE, "1" if torch else "0", "1" if toolchain else "0"])
    try:
        reads = json.loads(res["stdout"]) if res["rc"] == 0 else None
    except ValueError:
        reads = None
    if not isinstance(reads, dict):
        why = (res["stderr"] or res["stdout"]).strip()[-2000:] or f"exit {res['rc']}"
        return {name: {"rc": res["rc"] or 1, "stdout": "", "stderr": f"{python}: {why}"} for name in wanted}
    return {name: reads.get(name, {"rc": 1, "stdout": "", "stderr": "not read"}) for name in wanted}


def parse_fact(text):
    """A fact file's value: JSON, else INI (``{section: {option: raw value}}``), as the setup module does."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    cp = configparser.ConfigParser()
    cp.read_string(text)
    return {sect: {opt: cp.get(sect, opt, raw=True) for opt in cp.options(sect)} for sect in cp.sections()}


def local_facts(directory):
    """``{name: value}`` of every ``*.fact`` file (one that cannot be parsed: an error string, like setup)."""
    facts = {}
    for path in sorted(Path(directory).glob("*.fact")):
        try:
            facts[path.stem] = parse_fact(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, configparser.Error) as exc:
            facts[path.stem] = f"error loading fact - {path} is neither JSON nor INI: {exc}"
    return facts


def main():
    module = AnsibleModule(
        argument_spec={
            "cuda_home": {"type": "str", "default": ""},
            "venv_python": {"type": "path", "required": True},
            "torch": {"type": "bool", "default": True},
            "toolchain": {"type": "bool", "default": True},
            "local_facts_dir": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False}
    cuda_home = p["cuda_home"]
    if p["local_facts_dir"]:
        facts = local_facts(p["local_facts_dir"])
        result["ansible_facts"] = {"ansible_local": facts}
        toolkit = (facts.get("cuda_toolkit") or {}) if isinstance(facts.get("cuda_toolkit"), dict) else {}
        cuda_home = cuda_home or str((toolkit.get("toolkit") or {}).get("cuda_home") or "")
    if cuda_home:
        result["cuda_home"] = cuda_home
        nvcc = run([str(Path(cuda_home) / "bin" / "nvcc"), "--version"])
        nvcc["stdout_lines"] = nvcc["stdout"].splitlines()
        result["nvcc"] = nvcc
    result.update(venv_reads(p["venv_python"], p["torch"], p["toolchain"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
