#!/usr/bin/python3
"""Check what a new server config needs BEFORE the running server is stopped (stdlib only).

A restart must never take a healthy service down for a config that cannot
start. This runs while the old server still serves and fails, changing
nothing, when:

- the new port is held by a listener that is not a process of the unit
  (the unit's own old server may hold it: it is stopped next);
- the new bind address is not an address of this host;
- a file the new config needs is missing (``files``: path -> what needs it).

The GPU side (memory held, compute mode, MIG) is ``sglang_gpu_state``; the
start limit is reset right before every deliberate start (``systemctl
reset-failed``), so it cannot refuse one.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import listeners, unit_pids

DOCUMENTATION = r"""
module: sglang_precheck
short_description: Refuse a restart whose new config cannot start, while the old server still serves
options:
  unit: {description: systemd unit (its own processes may hold the port), type: str, required: true}
  port: {description: the new config's port, type: int, required: true}
  host: {description: the new config's bind address, type: str, default: 127.0.0.1}
  files: {description: "path -> what needs it; each must exist", type: dict, default: {}}
author: [sglang-ddtree deploy]
"""

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
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(addr[:2] if family == socket.AF_INET else addr)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"bind address {host!r} is not an address of this host"
            return f"bind address {host!r} cannot be bound: {exc.strerror}"
    return None


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "files": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    own = unit_pids(p["unit"])
    listening = listeners(p["port"])
    problems = []
    for check in (port_problem(p["port"], listening, own), bind_problem(p["host"])):
        if check:
            problems.append(check)
    for path, needed_by in sorted(p["files"].items()):
        if not Path(path).exists():
            problems.append(f"{path} does not exist ({needed_by})")
    result = {
        "changed": False,
        "unit_pids": sorted(own),
        "listeners": [line for line, _ in listening],
        "port_held_by_unit": bool(listening) and not port_problem(p["port"], listening, own),
    }
    if problems:
        module.fail_json(
            msg="the new configuration cannot start; the running server was not touched: " + "; ".join(problems),
            problems=problems,
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
