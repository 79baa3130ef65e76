"""The device-side tree build of sglang/srt/speculative/ddtree_utils.py (patched tree).

build_ddtree_batch selects each request's tree on the device (patch 0004): these
checks hold it to the host best-first heap (build_tree_nodes) it replaced, on tied
scores too, and show that a decode step's tree work reads nothing back to the host.
DDTREE_ROUNDS overrides the round count (never below 1000 in CI).
"""

from __future__ import annotations

import itertools
import os
import random

import pytest
import torch
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
from sglang.srt.speculative import ddtree_utils as U

ROUNDS = max(int(os.environ.get("DDTREE_ROUNDS", "1000")), 1)


def _draft_topk(rng: random.Random, bs: int, depths: int, cap: int, vocab: int):
    """A batch of per-depth draft top-k tables (log-probs descending) of random logits."""
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    logits = torch.randn((bs * depths, vocab), generator=g) * rng.choice([0.5, 2.0, 5.0])
    lp, ids = U.ddtree_topk_logprobs(logits, cap)
    return lp.view(bs, depths, -1), ids.view(bs, depths, -1)


def test_device_selection_equals_the_host_heap():
    """build_ddtree_batch selects on the device exactly the nodes, in the order, of the
    host best-first heap (build_tree_nodes) on inputs without exact score ties."""
    rng = random.Random(4242)
    for _ in range(ROUNDS):
        bs = rng.randint(1, 4)
        depths = rng.randint(1, 8)
        cap = rng.randint(1, 6)
        vocab = rng.randint(cap, 40)
        budget = rng.randint(1, 64)
        lp, ids = _draft_topk(rng, bs, depths, cap, vocab)
        tree = U.build_ddtree_batch(torch.randint(0, vocab, (bs,)), lp, ids, budget)
        for b in range(bs):
            parents, dep, ranks = U.build_tree_nodes(lp[b].tolist(), budget)
            n = len(parents)
            assert int(tree.num_nodes[b]) == n
            assert tree.parents[b, 1 : n + 1].tolist() == parents and tree.depths[b, 1 : n + 1].tolist() == dep
            want = [int(ids[b, d - 1, r]) for d, r in zip(dep, ranks, strict=True)]
            assert tree.tokens[b, 1 : n + 1].tolist() == want


def test_device_selection_with_tied_scores_is_prefix_closed_and_best():
    """Quantised log-probs (many exact ties, zeros included): still prefix-closed, parents
    first, no prefix twice, and the selected scores are the best `budget` of all prefixes."""
    rng = random.Random(77)
    for _ in range(ROUNDS):
        depths, cap, budget = rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 40)
        lp = torch.tensor(
            [sorted((-rng.choice([0.0, 0.5, 1.0, 1.5]) for _ in range(cap)), reverse=True) for _ in range(depths)]
        )
        ids = torch.arange(depths * cap).view(1, depths, cap)  # token = depth * cap + rank: ranks readable
        tree = U.build_ddtree_batch(torch.tensor([-1]), lp[None], ids, budget)
        n = int(tree.num_nodes[0])
        assert n == min(budget, sum(cap**d for d in range(1, depths + 1)))
        par, dep, tok = tree.parents[0].tolist(), tree.depths[0].tolist(), tree.tokens[0].tolist()
        seen, scores = set(), []
        for j in range(1, n + 1):
            assert 0 <= par[j] < j and dep[j] == dep[par[j]] + 1
            path, i = [], j
            while i > 0:
                path.append((dep[i] - 1, tok[i] - (dep[i] - 1) * cap))
                i = par[i]
            key = tuple(reversed(path))
            assert key not in seen, "a prefix selected twice"
            seen.add(key)
            scores.append(sum(float(lp[d, r]) for d, r in key))
        every = sorted(
            (sum(float(lp[t, r]) for t, r in enumerate(c)) for d in range(1, depths + 1)
             for c in itertools.product(range(cap), repeat=d)), reverse=True,
        )  # fmt: skip
        assert sorted(scores, reverse=True) == pytest.approx(every[:n])


def test_decode_step_runs_on_meta_tensors():
    """Everything the worker runs per decode step between the draft block and the KV
    write-back works on meta tensors: no host read of device data (.item(), .tolist(),
    .cpu(), boolean indexing), so nothing in it waits for the GPU. The series before this
    change copied the draft top-K to the host in build_ddtree_batch and fails here."""
    meta = torch.device("meta")
    bs, block, budget, k = 3, 8, 16, 4
    width = budget + 1
    lp = torch.empty((bs, block - 1, k), device=meta)
    ids = torch.empty((bs, block - 1, k), dtype=torch.int64, device=meta)
    roots = torch.empty((bs,), dtype=torch.int64, device=meta)
    prefix = torch.empty((bs,), dtype=torch.int64, device=meta)
    host_prefix_bound = torch.tensor([100, 7, 250])  # host tensor: what the worker sizes the mask from
    tree = U.build_ddtree_batch(roots, lp, ids, budget)
    U.ddtree_positions(tree.depths, prefix)
    U.pack_ddtree_mask(tree.ancestors, prefix, total_numel=U.ddtree_mask_numel_bound(host_prefix_bound, width))
    predict = torch.empty((bs, width), dtype=torch.int64, device=meta)
    accept_index, accept_len, bonus = U.ddtree_greedy_walk(tree, predict)
    out, commit = U.ddtree_commit_tokens(tree, accept_index, accept_len, bonus, block)
    src, dst, _keep = U.ddtree_accepted_path_gather(accept_index, accept_len, width)
    assert src.shape == dst.shape == (bs * block,) and out.shape == (bs, block) and commit.shape == (bs,)
    assert tree.tokens.device == meta and tree.ancestors.shape == (bs, width, width)
    assert U.ddtree_mask_numel_bound(host_prefix_bound, width) == width * (357 + 3 * width)


def _kernel_contract(**kw):
    """Stands in for sglang's CUDA tree_speculative_sampling_target_only on meta tensors: the
    argument checks its TensorMatcher makes (csrc/speculative/sampling.cuh), nothing computed."""
    bs, width = kw["candidates"].shape
    steps = kw["accept_index"].shape[1]
    vocab = kw["target_probs"].shape[-1]
    for name in ("candidates", "retrive_index", "retrive_next_token", "retrive_next_sibling"):
        assert kw[name].shape == (bs, width) and kw[name].dtype == torch.int64, name
    assert kw["accept_index"].dtype == torch.int32 and kw["accept_token_num"].shape == (bs,)
    assert kw["accept_token_num"].dtype == torch.int32
    assert kw["predicts"].shape == (bs * width,) and kw["predicts"].dtype == torch.int32
    assert kw["uniform_samples"].shape == (bs, width) and kw["uniform_samples"].dtype == torch.float32
    assert kw["uniform_samples_for_final_sampling"].shape == (bs,)
    for name in ("target_probs", "draft_probs"):
        assert kw[name].shape == (bs, width, vocab) and kw[name].dtype == torch.float32, name
        assert kw[name].is_contiguous(), name
    assert steps >= 1 and kw["threshold_single"] == 1.0 and kw["threshold_acc"] == 1.0
    kw["draft_probs"].zero_()  # what the kernel may read of it is zeros on entry


def test_sampled_verify_runs_on_meta_tensors():
    """The sampled path of a decode step (the target's sampling distribution with top-k / top-p /
    min-p, the coins, the kernel's inputs and the conversion of its outputs, greedy rows of a mixed
    batch) reads nothing back to the host either: on CUDA the kernel runs where the stand-in
    checks its arguments here."""
    meta = torch.device("meta")
    bs, block, budget, k, vocab = 3, 8, 16, 4, 50
    width = budget + 1
    tree = U.build_ddtree_batch(
        torch.empty((bs,), dtype=torch.int64, device=meta), torch.empty((bs, block - 1, k), device=meta),
        torch.empty((bs, block - 1, k), dtype=torch.int64, device=meta), budget,
    )  # fmt: skip
    info = SamplingBatchInfo(
        temperatures=torch.empty((bs, 1), device=meta), top_ps=torch.empty((bs,), device=meta),
        top_ks=torch.empty((bs,), dtype=torch.int32, device=meta), min_ps=torch.empty((bs,), device=meta),
        is_all_greedy=False, is_any_greedy=True, need_top_p_sampling=True, need_top_k_sampling=True,
        need_min_p_sampling=True, vocab_size=vocab,
    )  # fmt: skip
    logits = torch.empty((bs * width, vocab), device=meta)
    prefix = torch.empty((bs,), dtype=torch.int64, device=meta)
    index, length, bonus = U.ddtree_sample_verify(tree, logits, info, prefix, sampler=_kernel_contract)
    out, commit = U.ddtree_commit_tokens(tree, index, length, bonus, block)
    U.ddtree_accepted_path_gather(index, length, width)
    assert index.shape == (bs, block) and length.shape == bonus.shape == (bs,) and out.device == meta
    assert commit.shape == (bs,)
