#!/usr/bin/python3
"""Read the versions the version gate compares with the pins, in one round trip (stdlib only).

- ``nvcc``: ``CUDA_HOME/bin/nvcc --version`` (when ``cuda_home`` is set);
- ``sglang``: the installed distribution's version, read by the venv's
  interpreter (``importlib.metadata``);
- ``torch``: ``torch.version.cuda``, imported by the venv's interpreter (with
  ``torch``);
- ``toolchain``: what the JITs compile with: gcc, c++, the interpreter's
  Python.h and ninja (with ``toolchain``).

The venv's interpreter runs once for all three. Each read is returned as
``{rc, stdout, stderr}`` (rc 0: read; otherwise stderr says why), so the gate
names exactly what it found. Changes nothing.

With ``local_facts_dir`` (a play that gathers no facts, playbooks/reconfigure.yml)
it also returns the host's local facts (every ``*.fact`` file there, JSON or
INI, read as the setup module reads them; executable facts are not run) as
``ansible_local``, and an empty ``cuda_home`` is the cuda_toolkit fact's.
"""

from __future__ import annotations

import configparser
import json
import subprocess
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: preflight_stack_versions
short_description: nvcc's release, sglang's version, torch's CUDA and the JIT toolchain, in one call
options:
  cuda_home: {description: "the toolkit (empty: nvcc is not read)", type: str, default: ""}
  venv_python: {description: the server venv's interpreter, type: path, required: true}
  torch: {description: read torch.version.cuda, type: bool, default: true}
  toolchain: {description: look for gcc, c++, Python.h and ninja, type: bool, default: true}
  local_facts_dir:
    description: "read the local facts here and return them as ansible_local (empty: no)"
    type: str
    default: ""
author: [sglang-ddtree deploy]
"""

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
