"""Host-side helpers shared by the sglang_service modules (stdlib only).

Modules import it as ``ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host``; Ansible ships it
with each module that does (the collection's plugins/module_utils).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")
_PID_RE = re.compile(r"pid=(\d+)")


def unit_show(unit, props):
    """``systemctl show UNIT -p ...`` as a dict (missing properties are absent)."""
    out = subprocess.run(
        ["systemctl", "show", unit, "--no-pager"] + ["-p" + prop for prop in props],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)


def cgroup_pids(cgroup):
    """Every PID in a unit's cgroup (v2, hybrid or v1 name=systemd hierarchy)."""
    pids = set()
    if not cgroup:
        return pids
    for root in _CGROUP_ROOTS:
        try:
            pids.update(int(x) for x in (Path(root + cgroup) / "cgroup.procs").read_text(encoding="ascii").split())
        except OSError:
            continue
    return pids


def unit_pids(unit):
    """PIDs of a unit's processes now (empty when it runs nothing)."""
    return cgroup_pids(unit_show(unit, ("ControlGroup",)).get("ControlGroup", "")) if unit else set()


def listeners(port):
    """``(ss line, {pids})`` for every TCP listener on ``port``; pids are empty for a
    process this host cannot see (another PID namespace)."""
    res = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], check=False, capture_output=True, text=True)
    out = []
    for raw in res.stdout.splitlines():
        line = raw.strip()
        if line:
            out.append((line, {int(p) for p in _PID_RE.findall(line)}))
    return out
