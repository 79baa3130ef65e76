"""The per-step host copy of the draft top-K that DDTree's tree build used to make, measured
next to the device-side build that replaced it (patch 0004).

Before: every decode step copied the drafter's per-depth top-K log-probs to the
host (``.cpu().tolist()``), built each request's tree with a best-first heap
there, and copied the verify layout back (a blocking host->device copy). On a
GPU the first copy waits for everything queued before it (the draft block's
forward): the host stalls and overlap scheduling loses the step it should be
preparing. After: the same nodes are selected on the device with fixed shapes
(``build_ddtree_batch``); nothing is copied and the host only launches work.

Printed per (batch, budget): bytes copied per step each way, before / after;
host milliseconds per step, before / after, side by side in one run; the tensor
operations that compute (on a GPU each is a kernel launch, asynchronous; views
are not counted), before / after; and, on a CUDA device, how long the host is blocked when a draft-sized kernel is in
flight (the stall the copy causes; ``--inflight-ms`` of queued GPU work).
Without CUDA that last column reads n/a: a CPU tensor has no queued work to
wait for, which is exactly what this machine cannot show.

Usage::

    .venv-sglang-cpu/bin/python benchmarks/ddtree_topk_host_copy.py [--device cpu|cuda] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "patches" / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ddtree_tree_build import draft_topk, parser, with_patched_utils  # noqa: E402


def previous_build(U, torch, roots, lp, ids, *, budget):
    """build_ddtree_batch as the series had it before (patch 0004, verbatim but for names):
    top-K log-probs to the host, a heap and the node lists per request there, the layout back.
    Returns the tree and the bytes copied each way."""
    from array import array  # noqa: PLC0415

    device = roots.device
    bs, num_depths, k = (int(x) for x in ids.shape)
    width, span = budget + 1, num_depths + 1
    host_logprobs = lp.detach().float().cpu().tolist()  # the per-step device -> host copy (a sync on CUDA)
    flat, num_nodes = array("q"), []
    for b in range(bs):
        parents, depths, ranks = U.build_tree_nodes(host_logprobs[b], budget)
        n, pad = len(parents), budget - len(parents)
        par, dep, rnk = [-1, *parents] + [0] * pad, [0, *depths] + [1] * pad, [0, *ranks] + [0] * pad
        first, sib, last, paths = [-1] * width, [-1] * width, [-1] * width, [[0] * span]
        for i in range(1, n + 1):
            p = par[i]
            if first[p] < 0:
                first[p] = i
            else:
                sib[last[p]] = i
            last[p] = i
            prefix = paths[p][: dep[p] + 1]
            paths.append(prefix + [i] * (span - len(prefix)))
        for i in range(n + 1, width):
            paths.append([0] + [i] * (span - 1))
        flat.extend(par + dep + rnk + first + sib + [x for row in paths for x in row])
        num_nodes.append(n)
    host = torch.frombuffer(flat, dtype=torch.int64).view(bs, width * (5 + span))
    rows = host.to(device=device, copy=True)  # the blocking host -> device copy
    num_nodes_t = torch.tensor(num_nodes, dtype=torch.int64).to(device)
    depths_t, ranks_t = rows[:, width : 2 * width].contiguous(), rows[:, 2 * width : 3 * width]
    tokens = torch.gather(ids.reshape(bs, -1), 1, (depths_t - 1).clamp_min(0) * k + ranks_t)
    tokens[:, 0] = roots
    ancestors = torch.zeros((bs, width, width), dtype=torch.bool, device=device)
    ancestors.scatter_(2, rows[:, 5 * width :].reshape(bs, width, span), True)
    return (tokens, rows[:, :width], ancestors, num_nodes_t), 4 * bs * num_depths * k, 8 * (host.numel() + bs)


def ops_dispatched(torch, fn) -> int:
    """Tensor operations fn dispatches that compute (on a GPU: kernels to launch, the host's share of the
    work); views and reshapes of contiguous tensors only change metadata and are not counted."""
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += not (func.is_view or func is torch.ops.aten._unsafe_view.default)
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return Count.n


def _time(fn, sync, reps, warmup):
    out = []
    for i in range(warmup + reps):
        sync()
        t0 = time.perf_counter()
        fn()
        t = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            out.append(t)
    return statistics.median(out)


def stall_ms(torch, fn, inflight_ms, reps):
    """Host time spent inside fn while inflight_ms of GPU work is queued ahead of it."""
    a = torch.randn((4096, 4096), device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    a @ a
    torch.cuda.synchronize()
    per_mm = (time.perf_counter() - t0) * 1e3
    n = max(1, round(inflight_ms / per_mm))
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        for _ in range(n):
            a @ a  # the draft block's forward, still running when the tree is built
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def main() -> int:
    ap = parser(__doc__, batches="1,8,32", reps=30, warmup=3)
    ap.add_argument("--inflight-ms", type=float, default=10.0, help="CUDA: GPU work queued before the build")
    return with_patched_utils(ap.parse_args(), run)


def run(args: argparse.Namespace, torch, U) -> int:
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for bs in [int(x) for x in args.batches.split(",")]:
        for budget in [int(x) for x in args.budgets.split(",")]:
            lp, ids, roots = (t.to(dev) for t in draft_topk(torch, gen, bs, args.block - 1, args.topk))
            old = functools.partial(previous_build, U, torch, roots, lp, ids, budget=budget)
            new = functools.partial(U.build_ddtree_batch, roots, lp, ids, budget)
            rows.append({"batch": bs, "budget": budget, **measure(torch, args, dev, old, new)})
    print_table(args, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def measure(torch, args: argparse.Namespace, dev, old, new) -> dict:
    (tok_b, par_b, anc_b, _), d2h, h2d = old()
    now = new()  # the same tree, built on the device
    assert torch.equal(tok_b, now.tokens) and torch.equal(par_b, now.parents) and torch.equal(anc_b, now.ancestors)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    stall = (None, None)
    if dev.type == "cuda":
        stall = (stall_ms(torch, old, args.inflight_ms, args.reps), stall_ms(torch, new, args.inflight_ms, args.reps))
    return {
        "ops_before": ops_dispatched(torch, old),
        "ops_after": ops_dispatched(torch, new),
        "d2h_bytes_before": d2h,
        "h2d_bytes_before": h2d,
        "d2h_bytes_after": 0,
        "h2d_bytes_after": 0,
        "host_ms_before": _time(old, sync, args.reps, args.warmup),
        "host_ms_after": _time(new, sync, args.reps, args.warmup),
        "blocked_ms_before": stall[0],
        "blocked_ms_after": stall[1],
    }


def print_table(args: argparse.Namespace, rows: list[dict]) -> None:
    print(
        f"DDTree draft top-K host copy per decode step, before (host heap) / after (device build): block "
        f"{args.block}, topk cap {args.topk}, device {args.device}, torch threads {args.threads}, {args.reps} reps "
        "(medians)"
    )
    print(
        "| batch | budget | D2H bytes before / after | H2D bytes before / after | host ms before | host ms after "
        "| after / before | tensor ops before / after "
        f"| host blocked ms with {args.inflight_ms:g} ms queued, before / after |"
    )
    print("|---:|---:|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        blocked = "n/a (no CUDA)"
        if r["blocked_ms_before"] is not None:
            blocked = f"{r['blocked_ms_before']:.2f} / {r['blocked_ms_after']:.2f}"
        ratio = r["host_ms_after"] / r["host_ms_before"]
        print(
            f"| {r['batch']} | {r['budget']} | {r['d2h_bytes_before']} / 0 | {r['h2d_bytes_before']} / 0 "
            f"| {r['host_ms_before']:.3f} | {r['host_ms_after']:.3f} | {ratio:.2f} "
            f"| {r['ops_before']} / {r['ops_after']} | {blocked} |"
        )


if __name__ == "__main__":
    sys.exit(main())
