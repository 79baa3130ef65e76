"""DDTree verify buffers that grow with D = budget + 1, per GPU, and the largest budget that fits.

The same arithmetic the patched server runs at startup (ddtree_utils.ddtree_static_buffers /
ddtree_check_static_buffers, patch 0011): under CUDA graphs the Triton backend's kv_indices
(int64, max_bs * D * context), the packed verify mask (uint8, max_bs * D * (context + D)) and
the split-KV partials; eagerly the packed mask of one step (max running requests x D x
(context + D)). A budget fits when these take at most half of the GPU memory free at startup;
the server reads the free figure from the device, this script assumes (1 - mem_fraction_static)
of the GPU's memory (an upper bound of what is free once weights and the KV pool are in place).

Defaults: the bundle's two hosts serving Kimi K2.6 (context 262144, TP 8 -> 8 of its 64 heads per
GPU, MLA so the Triton backend's v_head_dim is kv_lora_rank 512, 8 KV splits): the B300 inventory
(CUDA graphs, --cuda-graph-max-bs-decode 64, 288 GB) and CT200 (no CUDA graphs, 48 running
requests, 96 GB). Needs torch (ddtree_utils imports it): run it with the CPU sglang venv::

    .venv-sglang-cpu/bin/python benchmarks/ddtree_static_buffers.py [--budgets 8,16,32,64,128,256,512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "patches" / "tools"))

import series  # noqa: E402

GIB = float(1 << 30)
HOSTS = {
    "b300 (CUDA graphs, bs 64)": dict(cuda_graph=True, max_bs=64, gpu_gib=268.2),
    "ct200 (eager, 48 running)": dict(cuda_graph=False, max_bs=48, gpu_gib=89.4),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="a patched package tree (default: build one)")
    ap.add_argument("--budgets", default="8,16,32,64,128,256,512")
    ap.add_argument("--context", type=int, default=262144)
    ap.add_argument("--heads", type=int, default=8, help="attention heads per GPU")
    ap.add_argument("--kv-splits", type=int, default=8)
    ap.add_argument("--v-head-dim", type=int, default=512)
    ap.add_argument("--mem-fraction-static", type=float, default=0.85)
    args = ap.parse_args()
    with series.given_or_temporary_tree(args.tree, prefix="ddtree-buffers-") as tree:
        return run(args, tree)


def run(args: argparse.Namespace, tree: Path) -> int:
    sys.path.insert(0, str(tree / "sglang" / "srt" / "speculative"))
    import ddtree_utils as U  # noqa: PLC0415 (from the patched tree, needs torch)

    budgets = [int(x) for x in args.budgets.split(",")]
    print(
        f"DDTree verify buffers per GPU that grow with D = budget + 1: context {args.context}, {args.heads} heads "
        f"per GPU, {args.kv_splits} KV splits, v_head_dim {args.v_head_dim}; a budget fits in "
        f"{U.DDTREE_STATIC_BUFFER_SHARE:.0%} of the free memory, assumed (1 - {args.mem_fraction_static}) of the GPU"
    )
    print("| host | budget | D | kv indices GiB | verify mask GiB | partials GiB | total GiB | fits |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    largest = {}
    for host, h in HOSTS.items():
        shape = dict(cuda_graph=h["cuda_graph"], max_bs=h["max_bs"], context_len=args.context)
        if h["cuda_graph"]:
            shape.update(num_heads=args.heads, max_kv_splits=args.kv_splits, v_head_dim=args.v_head_dim)
        limit = U.DDTREE_STATIC_BUFFER_SHARE * (1 - args.mem_fraction_static) * h["gpu_gib"] * GIB
        for budget in budgets:
            f = U.ddtree_static_buffers(width=budget + 1, **shape)
            print(
                f"| {host} | {budget} | {budget + 1} | {f.kv_indices / GIB:.2f} | {f.verify_mask / GIB:.2f} "
                f"| {f.attn_partials / GIB:.2f} | {f.total / GIB:.2f} | {'yes' if f.total <= limit else 'NO'} |"
            )
        largest[host] = (U.ddtree_largest_fitting_budget(limit, **shape), limit / GIB)
    for host, (n, limit) in largest.items():
        print(f"largest budget that fits on {host}: {n} (limit {limit:.1f} GiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
