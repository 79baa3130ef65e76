"""What a new server config needs, checked BEFORE the running server is stopped (stdlib only).

A restart must never take a healthy service down for a config that cannot
start. ``problems`` runs while the old server still serves and names, changing
nothing:

- the new port held by a listener that is not a process of the unit (the
  unit's own old server may hold it: it is stopped next);
- a bind address that is not an address of this host;
- a file the new config needs that is missing (``files``: path -> what needs it);
- with ``gpus``: a target GPU held by anything that is not the unit's own
  process, or a compute or MIG mode that would stop the server
  (module_utils/sglang_gpu.py, the checks of ``sglang_gpu_state``);
- with ``gpus`` and ``attention_backend``: an attention backend sglang 0.5.23
  cannot run on the target GPUs' compute capability, naming the ones it can
  (module_utils/sglang_backends.py).

The start limit is reset right before every deliberate start (``systemctl
reset-failed``, sglang_unit_install), so it cannot refuse one.
"""

from __future__ import annotations

import errno
import shutil
import socket
from pathlib import Path

from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_backends import backend_problem
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_gpu import SmiError, compute_caps, gpu_state
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host import listeners, unit_pids

#: The options of a precheck (sglang_unit_state's ``precheck``), with their defaults.
PRECHECK_SPEC = {
    "port": {"type": "int", "required": True},
    "host": {"type": "str", "default": "127.0.0.1"},
    "files": {"type": "dict", "default": {}},
    "gpus": {"type": "list", "elements": "int", "default": []},
    "gpu_required": {"type": "bool", "default": False},
    "gpu_memory_used_max_mib": {"type": "int", "default": 1024},
    "gpu_compute_modes_allowed": {"type": "list", "elements": "str", "default": ["Default"]},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "attention_backend": {"type": "str", "default": ""},
    "attention_backend_choices": {"type": "list", "elements": "str", "default": []},
}


def port_problem(port, listening, own):
    """Why the port cannot be bound by the new server, or None (pure: unit-tested)."""
    foreign = [(line, pids) for line, pids in listening if not pids or not pids <= own]
    if not foreign:
        return None
    shown = "; ".join(
        line + ("" if pids else " (no process visible here: another PID namespace?)") for line, pids in foreign
    )
    return (
        f"port {port} is held by another listener, not by this service: {shown} "
        "(choose a free sglang_service_port or stop that listener)"
    )


def bind_problem(host):
    """Whether the bind address is one of this host's (binding port 0 changes nothing)."""
    if host in ("0.0.0.0", "::", ""):
        return None
    try:
        infos = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"bind address {host!r} does not resolve: {exc}"
    family, addr = infos[0][0], infos[0][4]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(addr[:2] if family == socket.AF_INET else addr)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"bind address {host!r} is not an address of this host"
            return f"bind address {host!r} cannot be bound: {exc.strerror}"
    return None


def problems(unit, p):
    """Every reason the config ``p`` (PRECHECK_SPEC) cannot start now, and the details read."""
    own = unit_pids(unit)
    listening = listeners(p["port"])
    found = [check for check in (port_problem(p["port"], listening, own), bind_problem(p["host"])) if check]
    found += [f"{path} does not exist ({needed_by})" for path, needed_by in sorted(p["files"].items())
              if not Path(path).exists()]  # fmt: skip
    details = {
        "unit_pids": sorted(own),
        "listeners": [line for line, _pids in listening],
        "port_held_by_unit": bool(listening) and not port_problem(p["port"], listening, own),
    }
    if p["gpus"]:
        found += gpu_problems(p, unit, details)
    return found, details


def gpu_problems(p, unit, result):
    """The target GPUs' problems (the unit's own processes may hold memory); details go into ``result``."""
    smi = shutil.which(p["nvidia_smi"])
    if smi is None:
        result.update(gpu_checked=False, gpu_skipped_reason=f"no {p['nvidia_smi']} on this host")
        return [f"{p['nvidia_smi']} is not installed: the GPU state cannot be checked"] if p["gpu_required"] else []
    try:
        found, details = gpu_state(
            smi,
            p["gpus"],
            unit=unit,
            max_unattributed=p["gpu_memory_used_max_mib"],
            modes_allowed=p["gpu_compute_modes_allowed"],
        )
        caps = compute_caps(smi) if p["attention_backend"] else {}
    except SmiError as exc:
        return [f"reading the GPU state failed: {exc}"]
    result.update(gpu_checked=True, gpus=details["gpus"], processes=details["processes"], compute_caps=caps)
    out = [f"the target GPUs cannot take the server: {problem}" for problem in found]
    if p["attention_backend"]:
        targets = [{**g, "compute_cap": caps.get(g["index"], "?")} for g in details["gpus"]]
        why = backend_problem(p["attention_backend"], targets, p["attention_backend_choices"])
        out += [why] if why else []
    return out
