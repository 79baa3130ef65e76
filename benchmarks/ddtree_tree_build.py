"""DDTree host-side cost per decode step: tree construction + mask packing.

Times, per decode step, what the patched worker does between the drafter's
per-depth top-K and the target verify launch (sglang/srt/speculative/
ddtree_utils.py from the patch series):

    build_ddtree_batch   the best-first tree selected on the device + the
                         verify-layout tensors (tokens, parents, depths,
                         ancestors, first-child / next-sibling lists)
    pack_ddtree_mask     SGLang's packed [D, P_b + D] custom mask per request
    ddtree_positions     P + depth

for budgets 8/16/32/64 at batch 1 and 32 (block size 8, topk cap 4,
committed prefix length --prefix per request). The full-vocabulary top-K on
the drafter's logits is device work shared with plain DFLASH's argmax and is
not included. Reports median / p90 per step in milliseconds and the ratio to
one decode step (--step-ms, default 30 ms: ~150 tok/s at ~4.8 tokens per
step, the deployment's figures).

Needs torch: run it with the CPU sglang venv (patches/tools/make-cpu-venv.sh)
or any venv with torch. It imports ddtree_utils from a pristine 0.5.23
package tree with the series applied (built in a temporary directory unless
--tree points at one). Usage::

    .venv-sglang-cpu/bin/python benchmarks/ddtree_tree_build.py [--device cpu|cuda]
        [--prefix 1024] [--reps 50] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "patches" / "tools"))

import series  # noqa: E402


def _timed(fn, sync):
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def parser(doc: str, *, batches: str = "1,32", reps: int = 50, warmup: int = 5) -> argparse.ArgumentParser:
    """The options every DDTree per-step benchmark takes (the tree's shape and the timing)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="a patched package tree (default: build one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--budgets", default="8,16,32,64")
    ap.add_argument("--batches", default=batches)
    ap.add_argument("--reps", type=int, default=reps)
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the host side of one worker)")
    ap.add_argument("--json", type=Path)
    return ap


def draft_topk(torch, gen, bs: int, depths: int, topk: int, *, vocab: int = 163840) -> tuple:
    """The drafter's output after the device top-K: sorted log-probs, ids, root tokens
    (vocabulary: Kimi K2.6's size; only the top-K is used)."""
    lp = torch.sort(torch.rand((bs, depths, topk), generator=gen) * -4, dim=-1, descending=True).values
    ids = torch.randint(0, vocab, (bs, depths, topk), generator=gen)
    roots = torch.randint(0, vocab, (bs,), generator=gen)
    return lp, ids, roots


def with_patched_utils(args: argparse.Namespace, body) -> int:
    """body(args, torch, ddtree_utils) with ddtree_utils from a patched tree (--tree, or a temporary one)."""
    with series.given_or_temporary_tree(args.tree, prefix="ddtree-bench-") as tree:
        sys.path.insert(0, str(tree))
        # Imported here: torch is not in the project venv, and ddtree_utils must
        # come from the patched tree put first on sys.path just above.
        import torch  # noqa: PLC0415
        from sglang.srt.speculative import ddtree_utils  # noqa: PLC0415

        torch.set_num_threads(args.threads)
        return body(args, torch, ddtree_utils)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--prefix", type=int, default=1024, help="committed prefix length per request")
    ap.add_argument("--step-ms", type=float, default=30.0, help="one decode step, for the ratio")
    return with_patched_utils(ap.parse_args(), run)


def run(args: argparse.Namespace, torch, U) -> int:
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for bs in [int(x) for x in args.batches.split(",")]:
        for budget in [int(x) for x in args.budgets.split(",")]:
            lp, ids, roots = (t.to(dev) for t in draft_topk(torch, gen, bs, args.block - 1, args.topk))
            prefix = torch.full((bs,), args.prefix, dtype=torch.int64).to(dev)
            prefix_cpu = prefix.cpu()
            width = budget + 1
            total = int((width * (prefix_cpu + width)).sum())
            build, pack, step = [], [], []
            for rep in range(args.warmup + args.reps):
                box = {}

                def do_build(box=box, lp=lp, ids=ids, roots=roots, budget=budget):
                    box["tree"] = U.build_ddtree_batch(roots, lp, ids, budget)

                def do_pack(box=box, prefix=prefix, total=total):
                    t = box["tree"]
                    box["pos"] = U.ddtree_positions(t.depths, prefix)
                    box["mask"] = U.pack_ddtree_mask(t.ancestors, prefix, total_numel=total)

                tb = _timed(do_build, sync)
                tp = _timed(do_pack, sync)
                if rep >= args.warmup:
                    build.append(tb)
                    pack.append(tp)
                    step.append(tb + tp)
            assert box["mask"].numel() == total
            med = statistics.median(step)
            p90 = sorted(step)[int(0.9 * (len(step) - 1))]
            rows.append(
                {
                    "device": args.device,
                    "batch": bs,
                    "budget": budget,
                    "verify_width": width,
                    "prefix": args.prefix,
                    "mask_entries": total,
                    "build_ms_median": statistics.median(build),
                    "pack_ms_median": statistics.median(pack),
                    "step_ms_median": med,
                    "step_ms_p90": p90,
                    "step_ms_min": min(step),
                    "ratio_to_decode_step": med / args.step_ms,
                }
            )
    print(
        f"DDTree host cost per decode step: block {args.block}, topk cap {args.topk}, prefix {args.prefix}, "
        f"device {args.device}, torch threads {args.threads}, {args.reps} reps; decode step {args.step_ms} ms"
    )
    print(
        "| batch | budget | D | build ms (median) | mask+pos ms (median) | total ms (median) | total ms (p90) "
        "| total ms (min) | ratio (median / step) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['batch']} | {r['budget']} | {r['verify_width']} | {r['build_ms_median']:.3f} | "
            f"{r['pack_ms_median']:.3f} | {r['step_ms_median']:.3f} | {r['step_ms_p90']:.3f} | "
            f"{r['step_ms_min']:.3f} | {r['ratio_to_decode_step']:.3f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
