"""The target GPUs' state from nvidia-smi, and every reason they cannot take the server (stdlib only).

Shared by the sglang_gpu_state module (the checks before a stop) and sglang_stop_wait
(after a stop it waits, in the same async job, until the GPUs are free).
Modules import it as ``ansible_collections.ddtree.sglang.plugins.module_utils.sglang_gpu``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host import unit_pids

GPU_FIELDS = (
    "index", "uuid", "name", "memory.used", "memory.total", "compute_mode", "mig.mode.current", "mig.mode.pending",
)  # fmt: skip
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")


class SmiError(RuntimeError):
    pass


def run_smi(smi, args):
    res = subprocess.run([smi, *args], check=False, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise SmiError(f"{smi} {' '.join(args)} failed (rc={res.returncode}): {(res.stderr or res.stdout).strip()}")
    return res.stdout


def number(text):
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
                "memory_used_mib": number(row["memory.used"]),
                "memory_total_mib": number(row["memory.total"]),
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
            {"pid": int(parts[0]), "gpu_uuid": parts[1], "used_mib": number(parts[2]), "process_name": parts[3]}
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


def compute_caps(smi):
    """Each GPU's compute capability ('12.0') by index, from nvidia-smi."""
    out = {}
    for line in run_smi(smi, ["--query-gpu=index,compute_cap", "--format=csv,noheader"]).splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            out[int(parts[0])] = parts[1]
    return out


def gpu_state(smi, targets, *, unit, max_unattributed, modes_allowed, wait=False, timeout=0.0, poll_interval=1.0):
    """Read the target GPUs until no problem is left (``wait``) or ``timeout`` s pass.

    Returns ``(problems, details)``: ``problems`` empty when the GPUs can take the
    server; ``details`` has the target GPUs, the compute processes, the unit's own
    PIDs and ``waited_s``. Raises SmiError when nvidia-smi cannot be read.
    """
    t0 = time.monotonic()
    while True:
        try:
            gpus = parse_gpus(run_smi(smi, ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]))
            apps = parse_apps(
                run_smi(smi, ["--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"])
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SmiError(str(exc)) from exc
        allowed = unit_pids(unit) if unit else set()
        problems = problems_of(
            gpus, apps, targets, allowed=allowed, max_unattributed=max_unattributed, modes_allowed=modes_allowed
        )
        details = {
            "gpus": [g for g in gpus if g["index"] in targets],
            "processes": apps,
            "unit_pids": sorted(allowed),
            "waited_s": round(time.monotonic() - t0, 3),
        }
        if not problems or not wait or time.monotonic() - t0 > timeout:
            return problems, details
        time.sleep(poll_interval)
