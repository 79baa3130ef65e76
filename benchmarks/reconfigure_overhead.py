"""Reconfigure overhead: what one sweep step's play costs beyond the engine's own load.

Runs ``playbooks/reconfigure.yml`` through the sweep's own path
(``repro_py.sweep.reconfigure.AnsibleReconfigurer``, ansible-runner) against
the deployed test host of ``inventory/local`` (``make deploy`` first), once per
config of a small grid, twice over, each a real restart. Prints per play::

    wall        the play, from ansible-runner's start to its end
    ready       the new server's start -> ready, as the readiness check measured it
                (the simulated engine's load + warmup + the first requests)
    overhead    wall - ready: everything the play adds around the engine
    cpu         the CPU time of the play: on the controller (ansible-playbook and every
                process it waited for) and in the test hosts' containers (podman's common
                cgroup, --cgroup; "n/a" where there is none, e.g. a real host)
    tasks       tasks executed on the host / skipped / run on the controller only

then the medians. The target of the configuration contract is a median
overhead <= 10 s over SSH; the figures printed are this machine's, over the
connection the inventory names (SSH for inventory/local), with the simulated
engine: they say nothing about a GPU host's load time, only about the play
around it. The container figure counts every test host on the machine, so run
it with nothing else using them.

Usage::

    python benchmarks/reconfigure_overhead.py [--inventory inventory/local] [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repro_py.sweep.grid import PlannedConfig, validate_config  # noqa: E402
from repro_py.sweep.inventory import load_target  # noqa: E402
from repro_py.sweep.lease import HostLease, LeaseRefused, ansible_play_runner  # noqa: E402
from repro_py.sweep.reconfigure import AnsibleReconfigurer, read_events  # noqa: E402

#: podman's cgroupfs manager on cgroup v1 puts every container here (scripts/timed-stages.sh reads the same)
CONTAINERS_CGROUP = Path("/sys/fs/cgroup/cpuacct/libpod_parent/cpuacct.usage")

GRID: list[dict[str, object]] = [
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
    {"algorithm": "ddtree", "budget": 12, "topk": 6, "window": 2048, "block_size": 8},
    {"algorithm": "dflash", "window": 2048, "block_size": 8},
]


def task_counts(artifact_dir: Path) -> Counter[str]:
    """Per event kind: ``ok``/``changed``/``failed`` (executed), ``skipped``, from ansible-runner's events."""
    counts: Counter[str] = Counter()
    for event in read_events(artifact_dir):
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "runner_on_ok":
            counts["changed" if (data.get("res") or {}).get("changed") else "ok"] += 1
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            counts["failed"] += 1
        elif kind == "runner_on_skipped":
            counts["skipped"] += 1
        elif kind == "playbook_on_task_start":
            counts["started"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inventory", type=Path, default=ROOT / "inventory" / "local")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--cgroup", type=Path, default=CONTAINERS_CGROUP,
                   help="a cpuacct.usage file (ns) counting the test hosts' CPU")
    args = p.parse_args(argv)

    target = load_target(args.inventory)
    reconf = AnsibleReconfigurer(ROOT, target)
    configs = [validate_config(raw, simulated=True) for raw in GRID]
    rows: list[dict[str, object]] = []
    # the sweep's lease: taken once, carried by every play (which then only checks it is theirs)
    lease = HostLease(ansible_play_runner(reconf.run_play, reconf.bundle), f"overhead-{os.getpid()}")
    try:
        print(lease.acquire(), flush=True)
    except LeaseRefused as exc:
        print(f"refused, nothing was restarted: {exc}")
        return 3
    reconf.lease_vars = lease.extravars()
    try:
        run_rounds(reconf, configs, args.rounds, rows, args.cgroup)
    finally:
        print(lease.release(), flush=True)
    return summarize(rows, target.hostvars.get("ansible_connection", "ssh"), args.json)


def children_cpu_s() -> float:
    """User + system CPU seconds of every child process this one has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cgroup_cpu_s(path: Path) -> float | None:
    try:
        return int(path.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def run_rounds(
    reconf: AnsibleReconfigurer, configs: list[PlannedConfig], rounds: int, rows: list[dict[str, object]],
    cgroup: Path,
) -> None:
    """Each config once per round, each a real restart; one row per play (printed as it ends)."""
    with tempfile.TemporaryDirectory(prefix="reconfigure-overhead.") as tmp:
        for rnd in range(rounds):
            for cfg in configs:
                private = Path(tmp) / f"r{rnd}-{cfg.label}"
                cpu0, host0 = children_cpu_s(), cgroup_cpu_s(cgroup)
                started = time.monotonic()
                out = reconf.reconfigure(cfg, private, threading.Event())
                wall = time.monotonic() - started
                host1 = cgroup_cpu_s(cgroup)
                controller_cpu = children_cpu_s() - cpu0
                host_cpu = host1 - host0 if host0 is not None and host1 is not None else None
                # the outcome names its artifacts relative to the private dir's grandparent
                counts = task_counts(private.parent.parent / out.artifacts) if out.artifacts else Counter()
                executed = counts["ok"] + counts["changed"] + counts["failed"]
                row: dict[str, object] = {
                    "label": cfg.label,
                    "status": out.status,
                    "wall_s": round(wall, 2),
                    "ready_s": out.time_to_ready_s,
                    "overhead_s": round(wall - out.time_to_ready_s, 2) if out.time_to_ready_s is not None else None,
                    "controller_cpu_s": round(controller_cpu, 2),
                    "host_cpu_s": round(host_cpu, 2) if host_cpu is not None else None,
                    "tasks_executed": executed,
                    "tasks_skipped": counts["skipped"],
                    "tasks_started": counts["started"],
                }
                rows.append(row)
                print(
                    f"{cfg.label:28s} {out.status:10s} wall {wall:7.1f} s  ready {out.time_to_ready_s or 0:6.1f} s  "
                    f"overhead {row['overhead_s'] if row['overhead_s'] is not None else 'n/a':>7} s  "
                    f"cpu {controller_cpu:5.2f} + {host_cpu if host_cpu is not None else 'n/a':>5} s  "
                    f"tasks {executed} executed / {counts['skipped']} skipped",
                    flush=True,
                )


def summarize(rows: list[dict[str, object]], conn: object, json_path: Path | None) -> int:
    """The medians over the plays that ended ready after a restart; 1 when there is none."""
    good = [r for r in rows if r["status"] == "ready" and r["overhead_s"] is not None]
    unchanged = [r for r in rows if r["status"] == "ready" and r["overhead_s"] is None]
    failed = [r for r in rows if r["status"] != "ready"]
    if unchanged:
        print(f"{len(unchanged)} play(s) found the config already serving (no restart, no load to subtract); "
              "not counted: " + ", ".join(str(r["label"]) for r in unchanged))  # fmt: skip
    if failed:
        print(f"{len(failed)} play(s) did not end ready and are not counted: "
              + ", ".join(f"{r['label']} ({r['status']})" for r in failed))  # fmt: skip
    if not good:
        print("no play ended ready: no figures")
        return 1
    med_over = statistics.median(float(r["overhead_s"]) for r in good)  # type: ignore[arg-type]
    med_tasks = statistics.median(int(r["tasks_executed"]) for r in good)  # type: ignore[call-overload]
    med_wall = statistics.median(float(r["wall_s"]) for r in good)  # type: ignore[arg-type]
    med_ctl = statistics.median(float(r["controller_cpu_s"]) for r in good)  # type: ignore[arg-type]
    hosts = [float(r["host_cpu_s"]) for r in good if r["host_cpu_s"] is not None]  # type: ignore[arg-type]
    med_host = statistics.median(hosts) if hosts else None
    host_text = f"{med_host:.2f} CPU s" if med_host is not None else "n/a"
    print(f"\nconnection {conn}; {len(good)} plays; median wall {med_wall:.1f} s, median overhead {med_over:.1f} s "
          f"(target <= 10 s), median tasks executed {med_tasks:.0f}; median CPU per play: controller "
          f"{med_ctl:.2f} CPU s, test hosts {host_text}")  # fmt: skip
    if json_path:
        json_path.write_text(json.dumps({"connection": conn, "rows": rows, "median_overhead_s": med_over,
                                         "median_tasks_executed": med_tasks, "median_wall_s": med_wall,
                                         "median_controller_cpu_s": med_ctl, "median_host_cpu_s": med_host},
                                        indent=2) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
