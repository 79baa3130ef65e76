"""SGLang's own Triton kernels with DDTree inputs.

On CPU these run under TRITON_INTERPRET=1 (set by conftest.py); on a GPU
host patches/tools/run-gpu-kernel-tests.sh runs the same file with
DDTREE_TEST_DEVICE=cuda.

1. extend_attention_fwd (the kernel behind the Triton backend's
   TARGET_VERIFY) with the packed DDTree mask, a batch with different prefix
   lengths and budget + 1 != block size: the widths the patched target uses
   (D = budget + 1 for qo_indptr, mask_indptr, max_extend_len) match a plain
   torch reference; the widths 0.5.23 derives from the block size B are
   wrong, without any exception (the regression the series prevents).
2. verify_tree_greedy_triton agrees with ddtree_greedy_walk.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd
from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton
from sglang.srt.speculative import ddtree_utils as U

DEVICE = os.environ.get("DDTREE_TEST_DEVICE", "cpu")
REPORT = os.environ.get("DDTREE_KERNEL_REPORT")  # optional JSON lines file


def _report(**row):
    if REPORT:
        with Path(REPORT).open("a") as f:
            f.write(json.dumps(row) + "\n")


def _tree(rng, bs, block, budget, *, cap, vocab):
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    logits = torch.randn((bs, block - 1, vocab), generator=g) * 3
    lp, ids = U.ddtree_topk_logprobs(logits.view(-1, vocab), cap)
    lp = lp.view(bs, block - 1, -1)
    ids = ids.view(bs, block - 1, -1)
    return U.build_ddtree_batch(torch.randint(0, vocab, (bs,)), lp, ids, budget)


def _reference(q, k_ext, v_ext, k_pre, v_pre, *, prefix_lens, anc, width, scale):
    """Per request, per tree node: softmax over (whole prefix + ancestors + self)."""
    outs = []
    kv_start = 0
    for b, p in enumerate(prefix_lens.tolist()):
        rows = slice(b * width, (b + 1) * width)
        kp, vp = k_pre[kv_start : kv_start + p], v_pre[kv_start : kv_start + p]
        kv_start += p
        k_all = torch.cat([kp, k_ext[rows]], dim=0).float()  # [P + D, H, d]
        v_all = torch.cat([vp, v_ext[rows]], dim=0).float()
        allow = torch.cat([torch.ones((width, p), dtype=torch.bool), anc[b].cpu()], dim=1)  # [D, P + D]
        s = torch.einsum("qhd,khd->hqk", q[rows].float(), k_all) * scale
        s = s.masked_fill(~allow.to(s.device)[None], float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v_all))
    return torch.cat(outs, dim=0)


def _run_extend(prefix_lens, block, budget, *, widths_from_block, seed=0, heads=2, dim=32, cap=3):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    dev = torch.device(DEVICE)
    bs = len(prefix_lens)
    width = budget + 1
    tree = _tree(rng, bs, block, budget, cap=cap, vocab=50)
    prefix = torch.tensor(prefix_lens, dtype=torch.int64)
    n_pre = int(prefix.sum())
    dtype = torch.float32 if DEVICE == "cpu" else torch.float16
    # Rows/mask are over-allocated to the wider of the two widths, as the
    # backend's static buffers are, so wrong widths read stale data instead
    # of out-of-bounds memory.
    rows = bs * max(width, block)
    q = torch.randn((rows, heads, dim), dtype=dtype, device=dev)
    k_ext = torch.randn((rows, heads, dim), dtype=dtype, device=dev)
    v_ext = torch.randn((rows, heads, dim), dtype=dtype, device=dev)
    # the KV pool: prefix tokens at shuffled slots
    pool = n_pre + 7
    k_buf = torch.randn((pool, heads, dim), dtype=dtype, device=dev)
    v_buf = torch.randn((pool, heads, dim), dtype=dtype, device=dev)
    slots = torch.randperm(pool)[:n_pre].to(dev)
    k_pre, v_pre = k_buf[slots], v_buf[slots]
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32, device=dev)
    kv_indptr[1:] = torch.cumsum(prefix, 0).to(torch.int32)
    # what the verify input carries: tree mask of width D (always)
    packed = U.pack_ddtree_mask(tree.ancestors, prefix)
    wide = max(width, block)
    custom_mask = torch.zeros(int(U.ddtree_mask_indptr(prefix, wide)[-1]), dtype=torch.bool)
    custom_mask[: packed.numel()] = packed
    custom_mask = custom_mask.to(dev)
    # what the target's attention backend derives from its static width
    w = block if widths_from_block else width
    qo_indptr = torch.arange(0, (bs + 1) * w, w, dtype=torch.int32, device=dev)
    mask_indptr = U.ddtree_mask_indptr(prefix, w).to(dev)
    o = torch.zeros_like(q)
    scale = 1.0 / dim**0.5
    extend_attention_fwd(
        q, k_ext, v_ext, o, k_buf, v_buf,
        qo_indptr, kv_indptr, slots.to(torch.int64), custom_mask, True, mask_indptr, w,
        1.0, 1.0, sm_scale=scale,
    )  # fmt: skip
    n = bs * width
    ref = _reference(
        q[:n], k_ext[:n], v_ext[:n], k_pre, v_pre, prefix_lens=prefix, anc=tree.ancestors, width=width, scale=scale
    )
    return (o[:n].float() - ref).abs().max().item()


CASES = [
    # prefix lengths (differ per request), block B, budget (budget + 1 != B)
    ([5, 13, 2], 4, 6),
    ([9, 3], 8, 8),
    ([1, 7, 4, 11], 4, 2),
    ([37, 5, 120], 8, 16),  # the deployment's shape: B = 8, budget 16 -> D = 17
]


@pytest.mark.parametrize(("prefix_lens", "block", "budget"), CASES)
def test_extend_attention_tree_mask_with_target_widths(prefix_lens, block, budget):
    assert budget + 1 != block
    err = _run_extend(prefix_lens, block, budget, widths_from_block=False)
    tol = 1e-4 if DEVICE == "cpu" else 2e-2
    _report(test="extend_attention", widths="budget+1", device=DEVICE, prefix_lens=prefix_lens, block=block,
            budget=budget, max_abs_err=err)  # fmt: skip
    assert err < tol, f"DDTree verify with D = budget + 1 widths differs from the reference by {err}"


@pytest.mark.parametrize(("prefix_lens", "block", "budget"), CASES)
def test_extend_attention_with_block_widths_is_silently_wrong(prefix_lens, block, budget):
    err = _run_extend(prefix_lens, block, budget, widths_from_block=True)  # no exception ...
    _report(test="extend_attention", widths="block", device=DEVICE, prefix_lens=prefix_lens, block=block,
            budget=budget, max_abs_err=err)  # fmt: skip
    assert err > 0.1, f"widths from the block size should garble the output (max err {err})"


def test_budget_plus_one_equal_block_hides_the_bug():
    block, budget = 6, 5
    a = _run_extend([4, 9], block, budget, widths_from_block=False, seed=3)
    b = _run_extend([4, 9], block, budget, widths_from_block=True, seed=3)
    assert a == b and a < (1e-4 if DEVICE == "cpu" else 2e-2)


def test_verify_tree_greedy_triton_matches_walk():
    rng = random.Random(5)
    dev = torch.device(DEVICE)
    rounds = 200 if DEVICE == "cpu" else 1000
    deep = 0
    for _ in range(rounds):
        bs = rng.randint(1, 4)
        block = rng.randint(2, 8)
        budget = rng.randint(1, 20)
        tree = _tree(rng, bs, block, budget, cap=rng.randint(1, 4), vocab=12)
        width = budget + 1
        predict = torch.randint(0, 12, (bs, width))
        for b in range(bs):  # make paths match often
            for i in range(1, int(tree.num_nodes[b]) + 1):
                if rng.random() < 0.6:
                    predict[b, int(tree.parents[b, i])] = tree.tokens[b, i]
        ai, al, bonus = U.ddtree_greedy_walk(tree, predict)
        steps = block  # L + 1
        predicts = torch.zeros(bs * width, dtype=torch.int32, device=dev)
        accept_index = torch.full((bs, steps), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros(bs, dtype=torch.int32, device=dev)
        verify_tree_greedy_triton(
            predicts, accept_index, accept_num,
            tree.tokens.to(dev), tree.retrieve_index.to(dev), tree.retrieve_next_token.to(dev),
            tree.retrieve_next_sibling.to(dev), predict.to(dev),
        )  # fmt: skip
        assert accept_num.cpu().tolist() == al.tolist()
        for b in range(bs):
            a = int(al[b])
            assert accept_index[b, : a + 1].cpu().tolist() == [b * width + i for i in ai[b, : a + 1].tolist()]
            last = b * width + int(ai[b, a])
            assert int(predicts[last]) == int(bonus[b])
        deep += int((al >= 2).sum())
    assert deep > 0
