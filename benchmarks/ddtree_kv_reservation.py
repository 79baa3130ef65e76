"""DDTree KV reservation, before and after the fix: how far the verify window
runs past the request's own allocation, and how often.

Replays decode steps through SGLang 0.5.23's own reservation code and Triton
kernels (patches/tools/kv_window_sim.py; TRITON_INTERPRET=1 on CPU) for each
block size B, budget and scheduler (overlap on/off), twice: with 0.5.23's
``DFlashDraftInputV2.prepare_for_decode`` (2 * B past the host's committed
length: what the series used before the fix) and with the series'
(B + budget + 1). The worker's window per step is [P, P + max(B, budget + 1)).

Columns: request-steps replayed, the share whose window reaches past the
allocation, the most slots past it, window slots owned by another live
request (row reuse), and whether the worker-side invariant would have
stopped every overrun. Figures depend on the acceptance model (each tree
depth accepted with --accept-prob; commits of min(B, budget + 1) are the
worst case under overlap) and are printed with it.

Needs torch, triton and sglang's import-time deps: run it with the CPU sglang
venv (patches/tools/make-cpu-venv.sh)::

    .venv-sglang-cpu/bin/python benchmarks/ddtree_kv_reservation.py [--steps 30] [--running 16]
        [--blocks 8,16] [--budgets 4,7,8,15,16,32,64] [--accept-prob 0.8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "patches" / "tools"))

import series  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="a patched package tree (default: build one)")
    ap.add_argument("--blocks", default="8,16")
    ap.add_argument("--budgets", default="4,7,8,15,16,32,64")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--running", type=int, default=16, help="max running requests (rows are reused as they finish)")
    ap.add_argument("--accept-prob", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    with series.given_or_temporary_tree(args.tree, prefix="ddtree-kv-") as tree:
        return run(args, tree)


def run(args: argparse.Namespace, tree: Path) -> int:
    sys.path.insert(0, str(tree))
    import cpu_import_shims  # noqa: PLC0415

    cpu_import_shims.install_torchvision_stand_in()
    logging.disable(logging.WARNING)
    import kv_window_sim as S  # noqa: PLC0415
    from sglang.srt.speculative.ddtree_utils import ddtree_check_kv_window  # noqa: PLC0415

    pristine = S.load_pristine_draft_input(series.fetch_wheel())
    rows = []
    for block in [int(x) for x in args.blocks.split(",")]:
        for budget in [int(x) for x in args.budgets.split(",")]:
            for overlap in (True, False):
                case = S.Case(block, budget, overlap, max_running=args.running, steps=args.steps, seed=args.seed,
                              accept_prob=args.accept_prob)  # fmt: skip
                for label, cls in (("0.5.23 (before)", pristine), ("series (after)", None)):
                    out = S.simulate(case, draft_input_cls=cls, invariant=ddtree_check_kv_window)
                    rows.append({
                        "reservation": label, "block": block, "budget": budget, "verify_width": budget + 1,
                        "overlap": overlap, "request_steps": out.request_steps,
                        "overrun_share": out.overrun_share, "max_slots_past": out.max_overrun,
                        "foreign_slots": out.foreign_slots, "row_overflows": out.row_overflows,
                        "invariant_stops_every_overrun": out.invariant_missed == 0
                        and out.invariant_false_alarms == 0,
                        "rows_reused": out.rows_reused,
                    })  # fmt: skip
    print(
        f"KV window vs the request's allocation: {args.running} running requests, {args.steps} decode steps, "
        f"each tree depth accepted with p={args.accept_prob}, seed {args.seed}; SGLang's prepare_for_decode, "
        "allocator, ReqToTokenPool and Triton kernels (interpreted)"
    )
    print(
        "| B | budget | D | overlap | reservation | request-steps | steps past allocation | max slots past "
        "| foreign slots | row overflows | invariant stops each |"
    )
    print("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['block']} | {r['budget']} | {r['verify_width']} | {'on' if r['overlap'] else 'off'} "
            f"| {r['reservation']} | {r['request_steps']} | {r['overrun_share']:.0%} | {r['max_slots_past']} "
            f"| {r['foreign_slots']} | {r['row_overflows']} | {'yes' if r['invariant_stops_every_overrun'] else 'NO'} |"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json), "tree": str(tree)},
                                         "rows": rows}, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
