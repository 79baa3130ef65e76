#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Stop an SGLang unit and wait until the old server is really gone (stdlib only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_stop_wait
short_description: Stop a unit; wait for its old PIDs and its port to be released
description:
  - Records the unit's MainPID, InvocationID and every process of its cgroup, runs C(systemctl stop) (which also
    cancels a pending auto-restart), then polls until every old process has left C(/proc) and nothing listens on
    O(port) any more. No fixed sleeps; it returns as soon as both hold, and fails naming what is left. A port held
    by some other process fails at once, naming the listener.
  - With O(gpus) it then waits, within the same O(timeout) and the same async job, until nothing at all holds
    memory on those GPUs and their compute and MIG modes let the server start (the checks of
    M(ddtree.sglang.sglang_gpu_state)); after a stop the driver frees an exited process's memory a moment later.
  - With O(sync_limit) it waits at most that long in this run and then, if the old server is not gone yet,
    returns RV(pending) and a RV(resume) state; the role goes on with the same module as a polled async job
    (O(resume)), so a quick stop costs one round trip and a long drain never keeps one SSH session silent for
    longer than O(sync_limit).
  - In check mode it reports the unit's processes and stops nothing.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  unit: {description: The systemd unit name., type: str, required: true}
  port: {description: The server port that must be closed., type: int, required: true}
  host: {description: The address the port is probed at., type: str, default: 127.0.0.1}
  timeout: {description: The seconds to wait after the stop is issued., type: float, default: 300}
  poll_interval: {description: The seconds between polls., type: float, default: 0.5}
  gpus:
    description: "The GPUs to wait for after the stop (empty: no GPU wait)."
    type: list
    elements: int
    default: []
  gpu_required:
    description: Fail when nvidia-smi is not installed (otherwise the GPU wait is skipped).
    type: bool
    default: false
  gpu_memory_used_max_mib:
    description: The memory in use per GPU that no process accounts for (MiB) that is still accepted.
    type: int
    default: 1024
  gpu_compute_modes_allowed: {description: The compute modes accepted., type: list, elements: str, default: [Default]}
  nvidia_smi: {description: The nvidia-smi to run (a name on PATH or a path)., type: str, default: nvidia-smi}
  sync_limit:
    description: "Return RV(pending) (with RV(resume)) when not done after this many seconds (0: wait until done or
      O(timeout))."
    type: float
    default: 0
  resume:
    description: The RV(resume) state of a pending run; go on waiting, the stop already issued.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Stop the server; wait until the old process, its port and its GPU memory are gone
  ddtree.sglang.sglang_stop_wait:
    unit: sglang
    port: 30001
    timeout: 300
    gpus: [0]
    sync_limit: 10
  register: stop_sync

- name: Go on waiting until the old server is gone (a polled async job)
  ddtree.sglang.sglang_stop_wait:
    unit: sglang
    port: 30001
    timeout: 300
    gpus: [0]
    resume: "{{ stop_sync.resume }}"
  when: stop_sync.pending | default(false)
  async: 360
  poll: 5
"""

RETURN = r"""
old_main_pid: {description: "The unit's MainPID before the stop (0: none).", returned: always, type: int}
old_invocation_id: {description: The unit's InvocationID before the stop., returned: always, type: str}
old_pids: {description: The unit's processes before the stop., returned: always, type: list, elements: int}
old_state: {description: The unit's ActiveState before the stop., returned: always, type: str}
stop_s: {description: The seconds C(systemctl stop) took., returned: when the old server is gone, type: float}
gone_s: {description: The seconds until the old processes and the port were gone., returned: when gone, type: float}
gpu_checked: {description: Whether the GPUs were waited for., returned: with gpus when gone, type: bool}
gpu_skipped_reason: {description: Why they were not., returned: when nvidia-smi is not installed, type: str}
gpu_free_waited_s: {description: The seconds the GPU wait took., returned: when the GPUs were waited for, type: float}
pending: {description: Not done within O(sync_limit); go on with RV(resume)., returned: when pending, type: bool}
resume: {description: The state to pass as O(resume)., returned: when pending, type: dict}
waited_s: {description: The seconds waited so far., returned: when pending, type: float}
pids_alive: {description: The old processes still alive at the timeout., returned: failure, type: list, elements: int}
listeners: {description: The listeners on O(port) (C(ss) lines)., returned: failure, type: list, elements: str}
problems: {description: Why the GPUs are not free., returned: failure, type: list, elements: str}
"""

import shutil
import socket
import subprocess
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_gpu import SmiError, gpu_state
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host import cgroup_pids, listeners, unit_show


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


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "timeout": {"type": "float", "default": 300.0},
            "poll_interval": {"type": "float", "default": 0.5},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "gpu_required": {"type": "bool", "default": False},
            "gpu_memory_used_max_mib": {"type": "int", "default": 1024},
            "gpu_compute_modes_allowed": {"type": "list", "elements": "str", "default": ["Default"]},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "sync_limit": {"type": "float", "default": 0.0},
            "resume": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["resume"]:
        # a pending run's state: the stop was issued at t0_epoch (the same timeout counts from there)
        result = dict(p["resume"]["result"])
        old = set(result["old_pids"])
        t0 = time.monotonic() - max(0.0, time.time() - float(p["resume"]["t0_epoch"]))
    else:
        result, old = before_stop(p["unit"])
        if module.check_mode:
            module.exit_json(**result)
        t0 = time.monotonic()
    sync_end = time.monotonic() + p["sync_limit"] if p["sync_limit"] > 0 else None

    def pending():
        module.exit_json(
            pending=True,
            resume={"result": result, "t0_epoch": time.time() - (time.monotonic() - t0)},
            waited_s=round(time.monotonic() - t0, 3),
            **result,
        )

    try:
        # joins the stop job of a pending run (systemctl stop waits for the unit's stop job)
        stop = subprocess.run(
            ["systemctl", "stop", p["unit"]],
            check=False,
            capture_output=True,
            text=True,
            timeout=None if sync_end is None else max(0.1, sync_end - time.monotonic()),
        )
    except subprocess.TimeoutExpired:  # the stop job goes on in systemd (killing the client cancels nothing)
        pending()
    if stop.returncode != 0 and "not loaded" not in stop.stderr:
        module.fail_json(msg=f"systemctl stop {p['unit']} failed: {stop.stderr.strip()}", **result)
    stop_s = time.monotonic() - t0

    deadline = t0 + p["timeout"]
    while True:
        left = sorted(pid for pid in old if alive(pid))
        listening = port_open(p["host"], p["port"])
        if not left and listening:
            held = [line for line, _pids in listeners(p["port"])]
            module.fail_json(
                msg=f"port {p['port']} is still held after every process of {p['unit']} exited: "
                + ("; ".join(held) or "unknown listener"),
                listeners=held,
                **result,
            )
        if not left and not listening:
            break
        if time.monotonic() > deadline:
            module.fail_json(
                msg=f"{p['unit']}: old server not gone {p['timeout']:.0f} s after stop: "
                f"pids alive {left}, port {p['port']} open={listening}",
                pids_alive=left,
                listeners=[line for line, _pids in listeners(p["port"])],
                **result,
            )
        if sync_end is not None and time.monotonic() > sync_end:
            pending()
        time.sleep(p["poll_interval"])

    result.update(stop_s=round(stop_s, 3), gone_s=round(time.monotonic() - t0, 3))
    if p["gpus"]:
        wait_for_gpus(module, p, deadline, result, until=sync_end, pending=pending)
    module.exit_json(**result)


def before_stop(unit):
    """The unit's processes and identity before the stop (the result's ``old_*``), and its PIDs."""
    before = unit_show(unit, ("ActiveState", "SubState", "MainPID", "InvocationID", "ControlGroup"))
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
    return result, old


def wait_for_gpus(module, p, deadline, result, *, until=None, pending=None):
    """After the old server is gone: wait until the target GPUs are free, until the stop's deadline
    (or ``until``, this run's sync limit, when earlier: then still held is ``pending()``, not a failure)."""
    if until is None or until >= deadline:
        until, pending = deadline, None
    smi = shutil.which(p["nvidia_smi"])
    if smi is None:
        if p["gpu_required"]:
            module.fail_json(msg=f"{p['nvidia_smi']} is not installed: the GPU state cannot be checked", **result)
        result.update(gpu_checked=False, gpu_skipped_reason=f"no {p['nvidia_smi']} on this host")
        return
    try:
        problems, details = gpu_state(
            smi,
            p["gpus"],
            unit="",  # the old server is gone: nothing may hold memory now
            max_unattributed=p["gpu_memory_used_max_mib"],
            modes_allowed=p["gpu_compute_modes_allowed"],
            wait=True,
            timeout=max(0.0, until - time.monotonic()),
            poll_interval=p["poll_interval"],
        )
    except SmiError as exc:
        module.fail_json(msg=f"reading the GPU state failed: {exc}", **result)
    result.update(gpu_checked=True, gpu_free_waited_s=details["waited_s"])
    if problems and pending is not None:
        pending()
    if problems:
        module.fail_json(
            msg=f"the target GPUs are not free {p['timeout']:.0f} s after the stop of {p['unit']}: "
            + "; ".join(problems),
            problems=problems,
            gpus=details["gpus"],
            processes=details["processes"],
            **result,
        )


if __name__ == "__main__":
    main()
