#!/usr/bin/python3
"""Refuse a start on GPUs that cannot take the server (stdlib only).

Reads ``nvidia-smi`` (per GPU: memory used, compute mode, MIG mode; the
compute processes) for the target GPUs and fails, naming the GPU and the
cause, when:

- GPU memory is held by any process that is not the unit's own (``unit``:
  its cgroup PIDs are allowed; nothing else is, whoever started it);
- memory is in use that no listed process accounts for (another container's
  or VM's process, a leaked context) beyond ``memory_used_max_mib``;
- the compute mode is not in ``compute_modes_allowed`` (``Prohibited`` lets
  no process create a CUDA context; ``Exclusive_Process`` lets one process
  per GPU, so anything else holding a context stops the server);
- MIG is enabled, or pending (enabled at the next GPU reset): CUDA then sees
  MIG instances, not the whole GPUs the server is sized for.

``wait: true`` polls until the GPUs are free (after a stop the driver frees
an exited process's memory a moment later) and fails after ``timeout``.
Used by the preflight role (early) and by the restart chain (before the
running server is stopped, and after the stop).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_host import unit_pids

DOCUMENTATION = r"""
module: sglang_gpu_state
short_description: >-
  Refuse a start when the target GPUs are held by anything, or their compute/MIG mode would stop the server
options:
  gpus: {description: target GPU indices, type: list, elements: int, required: true}
  unit: {description: systemd unit whose own processes may hold GPU memory, type: str, default: ""}
  memory_used_max_mib:
    description: memory in use that no allowed process accounts for, per GPU
    type: int
    default: 1024
  compute_modes_allowed: {description: compute modes accepted, type: list, elements: str, default: [Default]}
  required: {description: fail when nvidia-smi is missing (otherwise report skipped), type: bool, default: false}
  nvidia_smi: {description: the nvidia-smi to run, type: str, default: nvidia-smi}
  wait: {description: poll until the GPUs are free or timeout passes, type: bool, default: false}
  timeout: {description: seconds to wait (wait true), type: float, default: 120}
  poll_interval: {description: seconds between polls, type: float, default: 1}
author: [sglang-ddtree deploy]
"""

GPU_FIELDS = (
    "index", "uuid", "name", "memory.used", "memory.total", "compute_mode", "mig.mode.current", "mig.mode.pending",
)  # fmt: skip
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")


class SmiError(RuntimeError):
    pass


def _run(smi, args):
    res = subprocess.run([smi, *args], check=False, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise SmiError(f"{smi} {' '.join(args)} failed (rc={res.returncode}): {(res.stderr or res.stdout).strip()}")
    return res.stdout


def _number(text):
    text = text.strip()
    try:
        return int(float(text))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpus(text):
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(GPU_FIELDS) or not parts[0].isdigit():
            continue
        row = dict(zip(GPU_FIELDS, parts, strict=True))
        gpus.append(
            {
                "index": int(row["index"]),
                "uuid": row["uuid"],
                "name": row["name"],
                "memory_used_mib": _number(row["memory.used"]),
                "memory_total_mib": _number(row["memory.total"]),
                "compute_mode": row["compute_mode"],
                "mig_current": row["mig.mode.current"],
                "mig_pending": row["mig.mode.pending"],
            }
        )
    return gpus


def parse_apps(text):
    apps = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",", len(APP_FIELDS) - 1)]
        if len(parts) != len(APP_FIELDS) or not parts[0].isdigit():
            continue
        apps.append(
            {"pid": int(parts[0]), "gpu_uuid": parts[1], "used_mib": _number(parts[2]), "process_name": parts[3]}
        )
    return apps


def comm(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "?"


def problems_of(gpus, apps, targets, *, allowed, max_unattributed, modes_allowed):
    """Every reason the target GPUs cannot take the server now (pure: unit-tested)."""
    problems = []
    by_index = {g["index"]: g for g in gpus}
    missing = [i for i in targets if i not in by_index]
    if missing:
        problems.append(f"GPU(s) {missing} not found (nvidia-smi lists {sorted(by_index)})")
    for index in targets:
        gpu = by_index.get(index)
        if gpu is None:
            continue
        label = f"GPU {index} ({gpu['name']}, {gpu['uuid']})"
        if gpu["compute_mode"] not in modes_allowed:
            why = {
                "Prohibited": "no process may create a CUDA context on it",
                "Exclusive_Process": "one process may hold a context on it; anything else holding one stops the server",
            }.get(gpu["compute_mode"], "not an allowed compute mode")
            problems.append(
                f"{label} compute mode is {gpu['compute_mode']}: {why} "
                f"(allowed: {', '.join(modes_allowed)}; nvidia-smi -i {index} -c DEFAULT)"
            )
        for key, when in (("mig_current", "enabled"), ("mig_pending", "pending (enabled at the next GPU reset)")):
            if gpu[key] == "Enabled":
                problems.append(
                    f"{label} MIG mode is {when}: CUDA sees MIG instances, not the whole GPU the server is sized for "
                    f"(nvidia-smi -i {index} -mig 0)"
                )
                break
        held = [a for a in apps if a["gpu_uuid"] == gpu["uuid"]]
        foreign = [a for a in held if a["pid"] not in allowed]
        for app in foreign:
            name = app["process_name"] or comm(app["pid"])
            used = "?" if app["used_mib"] is None else app["used_mib"]
            problems.append(f"{label}: {used} MiB held by pid {app['pid']} ({name}), not a process of this service")
        accounted = sum(a["used_mib"] or 0 for a in held)
        used_total = gpu["memory_used_mib"]
        if used_total is not None and used_total - accounted > max_unattributed:
            problems.append(
                f"{label}: {used_total - accounted} MiB in use that no listed process accounts for "
                f"({used_total} MiB used, {accounted} MiB by listed processes; allowed {max_unattributed} MiB): "
                "a process in another container or VM, or a leaked context"
            )
    return problems


def main():
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "list", "elements": "int", "required": True},
            "unit": {"type": "str", "default": ""},
            "memory_used_max_mib": {"type": "int", "default": 1024},
            "compute_modes_allowed": {"type": "list", "elements": "str", "default": ["Default"]},
            "required": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "wait": {"type": "bool", "default": False},
            "timeout": {"type": "float", "default": 120.0},
            "poll_interval": {"type": "float", "default": 1.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    smi = shutil.which(p["nvidia_smi"])
    if smi is None:
        if p["required"]:
            module.fail_json(msg=f"{p['nvidia_smi']} is not installed: the GPU state cannot be checked")
        module.exit_json(changed=False, checked=False, skipped_reason=f"no {p['nvidia_smi']} on this host")

    t0 = time.monotonic()
    while True:
        try:
            gpus = parse_gpus(_run(smi, ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]))
            apps = parse_apps(
                _run(smi, ["--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"])
            )
        except (SmiError, OSError, subprocess.TimeoutExpired) as exc:
            module.fail_json(msg=f"reading the GPU state failed: {exc}")
        allowed = unit_pids(p["unit"])
        problems = problems_of(
            gpus,
            apps,
            p["gpus"],
            allowed=allowed,
            max_unattributed=p["memory_used_max_mib"],
            modes_allowed=p["compute_modes_allowed"],
        )
        waited = round(time.monotonic() - t0, 3)
        if not problems:
            break
        if not p["wait"] or time.monotonic() - t0 > p["timeout"]:
            module.fail_json(
                msg="the target GPUs cannot take the server: " + "; ".join(problems)
                + (f" (after waiting {waited:.0f} s)" if p["wait"] else ""),
                problems=problems,
                gpus=[g for g in gpus if g["index"] in p["gpus"]],
                processes=apps,
                unit_pids=sorted(allowed),
                waited_s=waited,
            )
        time.sleep(p["poll_interval"])
    module.exit_json(
        changed=False,
        checked=True,
        gpus=[g for g in gpus if g["index"] in p["gpus"]],
        processes=apps,
        unit_pids=sorted(allowed),
        waited_s=waited,
    )


if __name__ == "__main__":
    main()
