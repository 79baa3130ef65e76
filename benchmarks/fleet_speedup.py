"""One host against three, side by side in one run: the fleet sweep's wall-time ratio, and the tuner's restarts and
wall time to its winner.

    .venv/bin/python benchmarks/fleet_speedup.py [--configs 12] [--sim-speed 20] [--load-s 5]
        [--lossless-restart separate|shared] [--tune-restarts 18] [--skip-sweep] [--skip-tune] [--json FILE]

Every run goes through the production command lines, ``python -m repro_py.sweep tests/fleet/inventory`` and
``python -m repro_py.tune tests/fleet/inventory``, with the local reconfigurer (a SIMULATED engine as a local
process per host, no Ansible, no test host): the one-host runs with ``--limit-hosts sglang-fleet-1``, the
three-host runs over the group. An inventory layer sets the simulated load time and speed per host (host
variables beat the group's) and adds the third host (the test inventory has the two that ``make test``'s fleet
deploys), on a service port of its own.

The sweep: the same grid (``--configs``) on one host and on three; prints each run's wall time, configs measured
and failed, and the ratio three/one (the issue's target: <= 0.40 for 12 configs).

The tuner: the same space, objective and ``--max-restarts`` on one host and on three; prints each run's winner,
its restarts and wall time in all, and when the winner's result was in: the restarts made by then (every host's)
and the wall time since the first config started. Whether the two runs found the same winner is printed, not
assumed: noise can rank two close configs either way.

What the figures leave out: the engines and the controller share this machine's two cores (a real fleet's hosts
have their own; the coding gate and the benchmark client run on the controller here as there), and the load time
is seconds, not a real model's 6-11 minutes: with real loads restarts dominate, and the ratio approaches the
restart count's (about 0.42 for 12 configs on 3 hosts with the lossless gate's own restarts). A benchmark that
prints figures, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
INVENTORY = ROOT / "tests" / "fleet" / "inventory"
HOSTS = ("sglang-fleet-1", "sglang-fleet-2", "sglang-fleet-3")
THIRD, THIRD_PORT = "sglang-fleet-3", 31043
#: the tuner's space: the baseline, the DFlash chain and 16 DDTree trees (the inventory's current config among them)
TUNE_SPACE = {
    "configs": [{"algorithm": "none"}, {"algorithm": "dflash", "window": 2048, "block_size": 8}],
    "grid": {"algorithm": ["ddtree"], "budget": [3, 5, 8, 12], "topk": [1, 2, 4, 8], "window": [2048],
             "block_size": [8]},
}  # fmt: skip


def grid(n: int) -> list[dict[str, object]]:
    """``n`` configs: the baseline, the DFlash chain, then DDTree budgets x top-K (the default config among them)."""
    out: list[dict[str, object]] = [{"algorithm": "none"}, {"algorithm": "dflash", "window": 2048}]
    for topk in (4, 8, 2, 6):
        for budget in (8, 4, 12, 16, 24, 32):
            if len(out) < n and budget >= topk:
                out.append({"algorithm": "ddtree", "budget": budget, "topk": topk, "window": 2048})
    return out[:n]


def _timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
    return done, wall


def sweep(args: argparse.Namespace, work: Path, name: str, limit: str) -> dict[str, object]:
    results = work / "results"
    cmd = [
        sys.executable, "-m", "repro_py.sweep", str(INVENTORY), "-i", str(work / "layer.yml"),
        "--limit-hosts", limit, "--reconfigurer", "local", "--grid", str(work / "grid.yml"),
        "--results", str(results), "--run-id", name, "--repeats", "1", "--max-tokens", str(args.max_tokens),
        "--bench-contexts", "60", "--bench-concurrency", "1", "4", "--lossless-restart", args.lossless_restart,
        "--no-report",
    ]  # fmt: skip
    done, wall = _timed(cmd)
    configs = list((results / name).rglob("configs/*.json"))
    failed = [p.stem for p in configs if json.loads(p.read_text()).get("status") != "ok"]
    return {"run": name, "hosts": limit, "rc": done.returncode, "wall_s": round(wall, 1), "configs": len(configs),
            "failed": failed}  # fmt: skip


def _when(text: object) -> dt.datetime:
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def tune(args: argparse.Namespace, work: Path, name: str, limit: str) -> dict[str, object]:
    results = work / "results"
    cmd = [
        sys.executable, "-m", "repro_py.tune", str(INVENTORY), "-i", str(work / "layer.yml"), "--limit-hosts", limit,
        "--reconfigurer", "local", "--objective", "single-stream", "--space", str(work / "space.yml"),
        "--max-restarts", str(args.tune_restarts), "--max-tokens", str(args.max_tokens), "--screen-tokens", "16",
        "--repeats", "2", "--lossless-restart", args.lossless_restart, "--results", str(results), "--run-id", name,
        "--no-write",
    ]  # fmt: skip
    done, wall = _timed(cmd)
    run = results / name
    row: dict[str, Any] = {"run": name, "hosts": limit, "rc": done.returncode, "wall_s": round(wall, 1)}
    try:
        search = json.loads((run / "tune" / "search.json").read_text())
    except (OSError, ValueError):
        return {**row, "winner": None}
    docs = [json.loads(p.read_text()) for p in (run / "configs").glob("*.json")]
    best = (search.get("winners") or [{}])[0]
    winner = best.get("label")
    row.update(winner=winner, restarts=search.get("restarts"), configs=len(docs),
               winner_tps=(best.get("estimate") or {}).get("mean"), runner_up=best.get("runner_up"),
               confidence=best.get("confidence"))  # fmt: skip
    mine = next((d for d in docs if d["label"] == winner), None)
    if mine is not None:
        start = min(_when(d["started_at"]) for d in docs)
        found = _when(mine["finished_at"])
        before = [d for d in docs if _when(d["finished_at"]) <= found]
        restarts = sum(2 if d.get("lossless_reconfigure") else 1 for d in before)
        row.update(restarts_to_winner=restarts, wall_to_winner_s=round((found - start).total_seconds(), 1))
    return row


def _print_sweeps(args: argparse.Namespace, one: dict[str, object], three: dict[str, object]) -> float:
    ratio = float(three["wall_s"]) / float(one["wall_s"]) if one["wall_s"] else float("nan")  # type: ignore[arg-type]
    print(f"sweep: {args.configs} configs, --lossless-restart {args.lossless_restart}")
    for row in (one, three):
        print(f"  {row['hosts']:>15}: {row['wall_s']:7.1f} s  rc={row['rc']}  configs={row['configs']}  "
              f"failed={row['failed'] or '-'}")  # fmt: skip
    print(f"  wall-time ratio, three hosts / one: {ratio:.3f} (target <= 0.40)")
    return ratio


def _print_tunes(args: argparse.Namespace, one: dict[str, Any], three: dict[str, Any]) -> None:
    size = len(TUNE_SPACE["grid"]["budget"]) * len(TUNE_SPACE["grid"]["topk"]) + 2
    print(f"tuner: single-stream, --max-restarts {args.tune_restarts} (every host's, the restores included), "
          f"{size} configs in the space")  # fmt: skip
    for row in (one, three):
        confidence = "-" if row.get("confidence") is None else f"{row['confidence']:.0%}"
        print(f"  {row['hosts']:>15}: winner {row.get('winner')} ({row.get('winner_tps') or 0:.1f} tok/s, runner-up "
              f"{row.get('runner_up')}, confidence {confidence}), {row.get('restarts')} restarts and "
              f"{row['wall_s']:.1f} s in all; winner in after {row.get('restarts_to_winner')} restarts, "
              f"{row.get('wall_to_winner_s')} s  rc={row['rc']}")  # fmt: skip
    same = one.get("winner") is not None and one.get("winner") == three.get("winner")
    print(f"  same winner: {'yes' if same else 'no'}; wall-time ratio three / one: "
          f"{three['wall_s'] / one['wall_s']:.3f} in all, "
          + (f"{three['wall_to_winner_s'] / one['wall_to_winner_s']:.3f} to the winner"
             if one.get("wall_to_winner_s") and three.get("wall_to_winner_s") else "- to the winner"))  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", type=int, default=12)
    p.add_argument("--sim-speed", type=float, default=20.0)
    p.add_argument("--load-s", type=float, default=5.0, help="simulated load time per restart (seconds)")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--lossless-restart", choices=("separate", "shared"), default="separate",
                   help="the runs' --lossless-restart (default: the sweep's own default, separate)")
    p.add_argument("--tune-restarts", type=int, default=18, help="the tuner's --max-restarts (both runs)")
    p.add_argument("--skip-sweep", action="store_true")
    p.add_argument("--skip-tune", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fleet-speedup-") as tmp:
        work = Path(tmp)
        per_host = {"sglang_service_sim_speed": args.sim_speed, "sglang_service_sim_load_seconds": args.load_s}
        hosts: dict[str, dict[str, Any]] = dict.fromkeys(HOSTS, per_host)
        hosts[THIRD] = {**per_host, "sglang_service_port": THIRD_PORT}  # not in tests/fleet/inventory
        layer = {"all": {"children": {"sglang_servers": {"hosts": hosts}}}}
        (work / "layer.yml").write_text(yaml.safe_dump(layer), encoding="utf-8")
        (work / "grid.yml").write_text(yaml.safe_dump({"configs": grid(args.configs)}), encoding="utf-8")
        (work / "space.yml").write_text(yaml.safe_dump(TUNE_SPACE), encoding="utf-8")
        print(f"SIMULATED engines (sim speed {args.sim_speed}, load {args.load_s} s per restart), local processes "
              "on this machine's 2 cores")  # fmt: skip
        if not args.skip_sweep:
            one, three = sweep(args, work, "one-host", HOSTS[0]), sweep(args, work, "three-hosts", "sglang_servers")
            out["sweep"] = {"one": one, "three": three, "ratio": _print_sweeps(args, one, three)}
        if not args.skip_tune:
            one, three = tune(args, work, "tune-one", HOSTS[0]), tune(args, work, "tune-three", "sglang_servers")
            out["tune"] = {"one": one, "three": three}
            _print_tunes(args, one, three)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0 if all(r["rc"] == 0 for part in out.values() for r in (part["one"], part["three"])) else 1


if __name__ == "__main__":
    sys.exit(main())
