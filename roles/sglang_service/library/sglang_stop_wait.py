#!/usr/bin/python3
"""Stop an SGLang unit and wait until the old server is really gone (stdlib only).

Records the unit's MainPID, InvocationID and every process of its cgroup,
runs ``systemctl stop`` (which also cancels a pending auto-restart), then polls
until every old process has left /proc, nothing listens on the port any more
and, where ``nvidia-smi`` exists, no old process holds GPU memory. No fixed
sleeps: it returns as soon as all three hold, and fails naming what is left.
A port held by some other process fails at once, naming the listener.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_stop_wait
short_description: Stop a unit; wait for its old PIDs, its port and its GPU memory to be released
options:
  unit: {description: systemd unit name, type: str, required: true}
  port: {description: the server port that must be closed, type: int, required: true}
  host: {description: address to probe, type: str, default: 127.0.0.1}
  timeout: {description: seconds to wait after the stop, type: float, default: 300}
  poll_interval: {description: seconds between polls, type: float, default: 0.5}
  gpu_check:
    description: wait for GPU memory release (auto = when nvidia-smi exists)
    type: str
    default: auto
    choices: [auto, always, never]
author: [sglang-ddtree deploy]
"""


def unit_show(unit):
    out = subprocess.run(
        ["systemctl", "show", unit, "--no-pager"]
        + ["-p" + prop for prop in ("ActiveState", "SubState", "MainPID", "InvocationID", "ControlGroup")],
        check=False,
        capture_output=True,
        text=True,
    ).stdout
    return dict(line.partition("=")[::2] for line in out.splitlines() if "=" in line)


def cgroup_pids(cgroup):
    pids = set()
    if not cgroup:
        return pids
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        path = Path(root + cgroup) / "cgroup.procs"
        try:
            pids.update(int(x) for x in path.read_text(encoding="ascii").split())
        except OSError:
            continue
    return pids


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def port_open(host, port):
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def listeners(port):
    res = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], check=False, capture_output=True, text=True)
    return [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]


def gpu_pids():
    res = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        check=False,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip() or res.stdout.strip())
    held = {}
    for line in res.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            held[int(parts[0])] = parts[1]
    return held


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "timeout": {"type": "float", "default": 300.0},
            "poll_interval": {"type": "float", "default": 0.5},
            "gpu_check": {"type": "str", "default": "auto", "choices": ["auto", "always", "never"]},
        },
        supports_check_mode=True,
    )
    p = module.params
    before = unit_show(p["unit"])
    main_pid = int(before.get("MainPID") or 0)
    old = cgroup_pids(before.get("ControlGroup", ""))
    if main_pid:
        old.add(main_pid)
    was_running = before.get("ActiveState") in ("active", "activating", "reloading", "deactivating")
    result = {
        "changed": was_running,
        "old_main_pid": main_pid,
        "old_invocation_id": before.get("InvocationID", ""),
        "old_pids": sorted(old),
        "old_state": before.get("ActiveState", ""),
    }
    if module.check_mode:
        module.exit_json(**result)

    use_gpu = p["gpu_check"] == "always" or (p["gpu_check"] == "auto" and shutil.which("nvidia-smi"))
    t0 = time.monotonic()
    stop = subprocess.run(["systemctl", "stop", p["unit"]], check=False, capture_output=True, text=True)
    if stop.returncode != 0 and "not loaded" not in stop.stderr:
        module.fail_json(msg=f"systemctl stop {p['unit']} failed: {stop.stderr.strip()}", **result)
    stop_s = time.monotonic() - t0

    deadline = t0 + p["timeout"]
    while True:
        left = sorted(pid for pid in old if alive(pid))
        listening = port_open(p["host"], p["port"])
        gpu_held = {}
        if use_gpu:
            try:
                gpu_held = {pid: mem for pid, mem in gpu_pids().items() if pid in old}
            except (OSError, RuntimeError) as exc:
                module.fail_json(msg=f"nvidia-smi failed while waiting for GPU memory release: {exc}", **result)
        if not left and listening:
            module.fail_json(
                msg=f"port {p['port']} is still held after every process of {p['unit']} exited: "
                + ("; ".join(listeners(p["port"])) or "unknown listener"),
                listeners=listeners(p["port"]),
                **result,
            )
        if not left and not listening and not gpu_held:
            break
        if time.monotonic() > deadline:
            module.fail_json(
                msg=f"{p['unit']}: old server not gone {p['timeout']:.0f} s after stop: "
                f"pids alive {left}, port {p['port']} open={listening}, GPU memory held (pid: MiB) {gpu_held}",
                pids_alive=left,
                listeners=listeners(p["port"]),
                **result,
            )
        time.sleep(p["poll_interval"])

    result.update(stop_s=round(stop_s, 3), gone_s=round(time.monotonic() - t0, 3), gpu_checked=bool(use_gpu))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
