"""Sampled DDTree verification (temperature > 0) is lossless in distribution.

1. The series' target-only tree sampling (ddtree_utils.ddtree_tree_sampling_target_only_torch,
   the torch twin of sglang's CUDA kernel tree_speculative_sampling_target_only, used where
   the kernel is absent, and ddtree_sampled_walk around it) against a reference written here
   from the algorithm (one coin per node, children in sibling order by cumulative target
   probability, the bonus from the target mass the rejected children did not cover):
   IDENTICAL outputs given identical uniform draws, on >= 10,000 random trees.
2. The target distribution it samples from (ddtree_sampling_target_probs: temperature,
   top-k, top-p, min-p after logit_bias) equals the one SGLang's plain sampler draws from
   (sampler.top_k_top_p_min_p_sampling_from_probs_torch).
3. In distribution, on the toy target of the scheduler replay (ddtree_sched/lm.py): for two
   fixed prompts, the first N = 4 tokens of 20,000 DDTree generations per prompt and
   temperature (0.6 and 1.0, top_p 0.9), built step by step with the series' functions in the
   worker's order (build_ddtree_batch -> apply_dflash_verify_logits_adjustments ->
   ddtree_sample_verify -> ddtree_commit_tokens), follow the exact distribution (enumerated
   with SGLang's plain sampler's filter) and the distribution of 20,000 plain autoregressive
   generations (SGLang's sampler, token by token): chi-square tests at ALPHA each. Two planted
   bugs, run here (first prompt, T = 1.0, 20,000 samples), must be caught by the same
   goodness-of-fit test: the bonus drawn from the unadjusted target distribution (the rejected
   children's mass not removed), and one coin reused at every node.

False alarms: each chi-square test rejects a correct implementation with probability ALPHA
(1e-4); 12 tests run on the correct one, so a fresh seed fails it with probability <= 1.2e-3
(Bonferroni). The seeds are fixed (DDTREE_SAMPLING_SEED changes them), so the outcome is
reproducible. Results print with -s (statistics, p-values, the planted bugs caught).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))

import triton  # noqa: E402
from ddtree_proof import chisquare as X  # noqa: E402
from ddtree_sched import lm  # noqa: E402
from sglang.kernels.ops.sampling import murmur_hash  # noqa: E402
from sglang.kernels.ops.speculative.verify_sampling import (  # noqa: E402
    tree_speculative_sampling_target_only as CUDA_KERNEL,  # None without CUDA
)
from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch  # noqa: E402
from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo  # noqa: E402
from sglang.srt.sampling.sampling_params import TOP_K_ALL  # noqa: E402
from sglang.srt.speculative import ddtree_utils as U  # noqa: E402
from sglang.srt.speculative.dflash_utils import apply_dflash_verify_logits_adjustments  # noqa: E402
from sglang.srt.speculative.eagle_utils import _seeded_verify_coins  # noqa: E402

TREES = max(int(os.environ.get("DDTREE_SAMPLING_TREES", "10000")), 10000)
SAMPLES = max(int(os.environ.get("DDTREE_SAMPLING_SAMPLES", "20000")), 20000)
SEED = int(os.environ.get("DDTREE_SAMPLING_SEED", "20261202"))
ALPHA = 1e-4
N_TOKENS = 4
PROMPTS = ([5, 17, 3, 29, 8], [40, 2, 2, 11])
BLOCK, BUDGET, TOPK = 8, 16, 4
MAX_COIN = 1.0 - 2.0**-24
DEVICE_IS_CPU = os.environ.get("DDTREE_TEST_DEVICE", "cpu") == "cpu"


# ---- 1. the reference, written from the algorithm -----------------------------------------------
def reference_tree_sampling(parents, valid, tokens, probs, coins, final_coin, steps, t_single=1.0, t_acc=1.0):  # noqa: PLR0917
    """One request. parents/valid/tokens: the tree ([D]); probs [D, V] float32 (the target's
    distribution at every node); coins [D] (node i's coin, drawn when the walk reaches i);
    steps = 1 + the deepest accept allowed. Children are the valid nodes whose parent is the
    current node, in index order. Returns (path of node indices from the root, bonus token)."""
    width = len(parents)
    children = {i: [] for i in range(width)}
    for j in range(1, width):
        if valid[j]:
            children[parents[j]].append(j)
    node, coin, path, rejected = 0, np.float32(coins[0]), [0], []
    thr_acc = np.float32(max(t_acc, 1e-9))
    thr_single = np.float32(t_single)
    for _ in range(1, steps):
        acc, chosen, rejected = np.float32(0.0), None, []
        for child in children[node]:
            p = np.float32(probs[node][tokens[child]])
            acc = np.float32(acc + p)
            if p > 0 and (coin < np.float32(acc / thr_acc) or p >= thr_single):
                chosen = child
                break
            rejected.append(tokens[child])
        if chosen is None:
            break
        node, coin = chosen, np.float32(coins[chosen])
        path.append(chosen)
        rejected = []
    # The bonus: inverse CDF over the target's mass not covered by the rejected children
    # (the whole target after an accept at the deepest allowed level).
    residual = torch.as_tensor(probs[node], dtype=torch.float32).clone()
    if len(path) - 1 != steps - 1:
        residual[rejected] = 0.0
    cdf = torch.cumsum(residual, dim=0)
    u = np.float32(np.float32(final_coin) * np.float32(cdf[-1]))
    hits = torch.nonzero((residual > 0) & (cdf > float(u))).flatten()
    if len(hits):
        bonus = int(hits[0])
    else:  # rounding left nothing above u: the last token with mass (the kernel's choice)
        positive = torch.nonzero(residual > 0).flatten()
        bonus = int(positive[-1]) if len(positive) else len(residual) - 1
    return path, bonus


def _random_probs(rng, g, tree, vocab):
    """Target distributions per node: sparse, often concentrated on the node's own children,
    sometimes one-hot (p == 1), sometimes with a child at zero mass."""
    bs, width = tree.tokens.shape
    raw = torch.rand((bs, width, vocab), generator=g) ** rng.choice([1.0, 3.0, 8.0])
    raw = raw * (torch.rand((bs, width, vocab), generator=g) > rng.choice([0.0, 0.3, 0.7]))
    boost = torch.rand((bs, width), generator=g) < 0.6
    # every node's own token in its parent's row: boosted, or (5%) at zero mass
    rows = torch.arange(bs)[:, None].expand(bs, width)
    par, tok = tree.parents.clamp_min(0), tree.tokens
    child = tree.valid & (torch.arange(width)[None, :] > 0)
    lift = torch.where(child & boost.gather(1, par), torch.rand((bs, width), generator=g) * 4, 0.0)
    raw[rows, par, tok] += lift
    zero = child & (torch.rand((bs, width), generator=g) < 0.05)
    raw[rows, par, tok] = torch.where(zero, 0.0, raw[rows, par, tok])
    one_hot = torch.rand((bs, width), generator=g) < 0.05
    hot = torch.randint(0, vocab, (bs, width), generator=g)
    raw = torch.where(one_hot[..., None], torch.nn.functional.one_hot(hot, vocab).float(), raw)
    raw[..., 0] += (raw.sum(-1) == 0).float()  # no all-zero row
    return (raw / raw.sum(-1, keepdim=True)).to(torch.float32).contiguous()


def _random_coins(g, probs, tree):
    bs, width = tree.tokens.shape
    coins = torch.rand((bs, width), generator=g)
    final = torch.rand((bs,), generator=g)
    edge = torch.rand((bs, width), generator=g)
    coins = torch.where(edge < 0.02, torch.zeros_like(coins), coins)
    coins = torch.where((edge > 0.02) & (edge < 0.04), torch.full_like(coins, MAX_COIN), coins)
    # a coin exactly on a child's cumulative probability: "coin < acc" is false there
    first_child = tree.retrieve_next_token.clamp_min(0)
    tok = tree.tokens.gather(1, first_child)
    at = probs.gather(2, tok[..., None]).squeeze(-1)
    coins = torch.where((edge > 0.04) & (edge < 0.07), at, coins)
    final = torch.where(edge[:, 0] < 0.03, torch.full_like(final, MAX_COIN), final)
    return coins.contiguous(), final.contiguous()


def _tree_batch(rng, g, bs):
    depths, cap = rng.randint(1, 7), rng.randint(1, 4)
    vocab = rng.randint(max(cap, 2), 40)
    budget = rng.randint(1, 40)
    logits = torch.randn((bs * depths, vocab), generator=g) * rng.choice([0.5, 2.0, 5.0])
    lp, ids = U.ddtree_topk_logprobs(logits, cap)
    roots = torch.randint(0, vocab, (bs,), generator=g)
    tree = U.build_ddtree_batch(roots, lp.view(bs, depths, -1), ids.view(bs, depths, -1), budget)
    return tree, vocab


def test_twin_equals_the_reference_on_random_trees():
    """>= 10,000 random trees and draws: the series' torch twin and ddtree_sampled_walk give
    exactly the reference's accepted path, accept length and bonus (and the kernel's outputs:
    predicts along the path, accept_index as retrieve indices)."""
    rng = random.Random(SEED)
    g = torch.Generator().manual_seed(SEED)
    trees = mismatches = walk_mismatches = deep = bonus_after_reject = thresholds_below_one = 0
    started = time.monotonic()
    while trees < TREES:
        bs = rng.randint(1, 64)
        tree, vocab = _tree_batch(rng, g, bs)
        probs = _random_probs(rng, g, tree, vocab)
        coins, final = _random_coins(g, probs, tree)
        width, steps = tree.width, tree.max_depth + 1
        t_single, t_acc = (1.0, 1.0) if rng.random() < 0.85 else (rng.choice([0.3, 0.9, 1.0]), rng.uniform(0.2, 1.0))
        thresholds_below_one += bs * ((t_single, t_acc) != (1.0, 1.0))
        predicts = torch.zeros((bs * width,), dtype=torch.int32)
        accept_index = torch.full((bs, steps), -7, dtype=torch.int32)
        accept_num = torch.zeros((bs,), dtype=torch.int32)
        U.ddtree_tree_sampling_target_only_torch(
            predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
            candidates=tree.tokens, retrive_index=tree.retrieve_index,
            retrive_next_token=tree.retrieve_next_token, retrive_next_sibling=tree.retrieve_next_sibling,
            uniform_samples=coins, uniform_samples_for_final_sampling=final, target_probs=probs,
            draft_probs=torch.zeros_like(probs), threshold_single=t_single, threshold_acc=t_acc,
        )  # fmt: skip
        walk = None
        if (t_single, t_acc) == (1.0, 1.0):
            walk = U.ddtree_sampled_walk(tree, probs, coins, final)
        for b in range(bs):
            n = int(tree.num_nodes[b])
            path, bonus = reference_tree_sampling(
                tree.parents[b].tolist(), tree.valid[b].tolist(), tree.tokens[b].tolist(), probs[b].numpy(),
                coins[b].numpy(), float(final[b]), steps, t_single, t_acc,
            )  # fmt: skip
            a = len(path) - 1
            got_path = [int(x) - b * width for x in accept_index[b, : int(accept_num[b]) + 1]]
            on_path = [int(predicts[b * width + i]) for i in path]
            want_on_path = [int(tree.tokens[b, i]) for i in path[1:]] + [bonus]
            if int(accept_num[b]) != a or got_path != path or on_path != want_on_path:
                mismatches += 1
            if walk is not None:
                index, length, wbonus = walk
                differs = int(length[b]) != a or index[b, : a + 1].tolist() != path or int(wbonus[b]) != bonus
                if differs and float(probs[b, path[-1], bonus]) > 0:  # else the guard replaced a massless bonus
                    walk_mismatches += 1
                if index[b, a + 1 :].tolist() != [-1] * (steps - 1 - a):
                    walk_mismatches += 1
            deep += int(a >= 2)
            bonus_after_reject += int(a < min(steps - 1, n) and bool((tree.parents[b, 1 : n + 1] == path[-1]).any()))
        trees += bs
    took = time.monotonic() - started
    print(
        f"\ntree sampling, twin vs reference: {trees} random trees, {mismatches} mismatches (kernel outputs), "
        f"{walk_mismatches} mismatches (ddtree_sampled_walk); {deep} accepts of depth >= 2, {bonus_after_reject} "
        f"bonus draws after rejected children, {thresholds_below_one} trees with thresholds below 1; {took:.1f} s"
    )
    assert trees >= 10000
    assert mismatches == 0 and walk_mismatches == 0
    assert deep > trees // 10 and bonus_after_reject > trees // 10  # the draws reach both branches


@pytest.mark.skipif(DEVICE_IS_CPU, reason="needs sglang's CUDA kernel (run-gpu-kernel-tests.sh on a GPU)")
def test_cuda_kernel_agrees_with_the_twin():
    """On a GPU: sglang's tree_speculative_sampling_target_only (the JIT-built kernel) against the
    torch twin on the same random trees and draws: the same accepted paths; the same bonus except
    where the final coin lies within float rounding of a CDF boundary (the kernel sums its residual
    in another order), at most 0.1% of the trees."""
    rng = random.Random(SEED + 9)
    g = torch.Generator().manual_seed(SEED + 9)
    trees = path_mismatches = bonus_mismatches = 0
    while trees < TREES:
        bs = rng.randint(1, 64)
        tree, vocab = _tree_batch(rng, g, bs)
        probs = _random_probs(rng, g, tree, vocab)
        coins, final = _random_coins(g, probs, tree)
        cpu = U.ddtree_sampled_walk(tree, probs, coins, final)
        dev = lambda t: t.to("cuda")  # noqa: E731
        tree_cuda = U.DDTreeBatch(**{k: dev(v) if torch.is_tensor(v) else v for k, v in vars(tree).items()})
        gpu = U.ddtree_sampled_walk(tree_cuda, dev(probs), dev(coins), dev(final), sampler=CUDA_KERNEL)
        for b in range(bs):
            same_path = cpu[0][b].tolist() == gpu[0][b].cpu().tolist() and int(cpu[1][b]) == int(gpu[1][b])
            path_mismatches += int(not same_path)
            bonus_mismatches += int(same_path and int(cpu[2][b]) != int(gpu[2][b]))
        trees += bs
    print(f"\nCUDA kernel vs twin: {trees} trees, {path_mismatches} path mismatches, {bonus_mismatches} bonus "
          f"mismatches (rounding at a CDF boundary)")  # fmt: skip
    if report := os.environ.get("DDTREE_KERNEL_REPORT"):  # run-gpu-kernel-tests.sh's kernels.jsonl
        with Path(report).open("a") as f:
            f.write(json.dumps({"check": "tree_speculative_sampling_target_only vs torch twin", "trees": trees,
                                "path_mismatches": path_mismatches, "bonus_mismatches": bonus_mismatches}) + "\n")
    assert path_mismatches == 0 and bonus_mismatches <= trees // 1000


def test_reference_is_not_vacuous():
    """The comparison would see a wrong walk: a twin fed other coins disagrees with the reference."""
    rng = random.Random(SEED + 1)
    g = torch.Generator().manual_seed(SEED + 1)
    tree, vocab = _tree_batch(rng, g, 64)
    probs = _random_probs(rng, g, tree, vocab)
    coins, final = _random_coins(g, probs, tree)
    index, _length, bonus = U.ddtree_sampled_walk(tree, probs, coins.roll(1, dims=1), final)
    differ = 0
    for b in range(64):
        path, want = reference_tree_sampling(
            tree.parents[b].tolist(), tree.valid[b].tolist(), tree.tokens[b].tolist(), probs[b].numpy(),
            coins[b].numpy(), float(final[b]), tree.max_depth + 1,
        )  # fmt: skip
        differ += int(index[b, : len(path)].tolist() != path or int(bonus[b]) != want)
    assert differ > 0


def test_zero_mass_bonus_is_replaced_by_the_most_likely_token():
    """Rounding can leave the kernel no index above its final coin; it then returns the last
    vocabulary id even with no mass there. ddtree_sampled_walk never emits such a token."""
    tree = U.build_ddtree_batch(torch.tensor([0]), torch.tensor([[[-0.1, -0.2]]]), torch.tensor([[[3, 4]]]), 2)
    probs = torch.zeros((1, 3, 6))
    probs[0, 0, 3], probs[0, 0, 4] = 0.6, 0.4  # the root's two children have all the mass
    probs[0, 1:, 2] = 1.0
    coins = torch.tensor([[1.0, 0.5, 0.5]])  # a coin at 1.0 rejects both: no residual mass left
    predicts = torch.zeros(3, dtype=torch.int32)
    raw = dict(accept_index=torch.zeros((1, 2), dtype=torch.int32), accept_token_num=torch.zeros(1, dtype=torch.int32))
    U.ddtree_tree_sampling_target_only_torch(
        predicts=predicts, candidates=tree.tokens, retrive_index=tree.retrieve_index,
        retrive_next_token=tree.retrieve_next_token, retrive_next_sibling=tree.retrieve_next_sibling,
        uniform_samples=coins, uniform_samples_for_final_sampling=torch.tensor([0.5]), target_probs=probs,
        draft_probs=torch.zeros_like(probs), **raw,
    )  # fmt: skip
    assert int(raw["accept_token_num"][0]) == 0 and int(predicts[0]) == 5  # the kernel's last-id fallback
    _index, length, bonus = U.ddtree_sampled_walk(tree, probs, coins, torch.tensor([0.5]))
    assert int(length[0]) == 0 and int(bonus[0]) == 3  # the walk emits a token with mass instead


# ---- 2. the distribution it samples from ------------------------------------------------------
def sampling_info(temps, top_ps, top_ks, min_ps, vocab, *, logit_bias=None, seed=None):
    top_ks_t = torch.tensor(top_ks, dtype=torch.int32)
    return SamplingBatchInfo(
        temperatures=torch.tensor(temps, dtype=torch.float32).view(-1, 1),
        top_ps=torch.tensor(top_ps, dtype=torch.float32),
        top_ks=top_ks_t,
        min_ps=torch.tensor(min_ps, dtype=torch.float32),
        is_all_greedy=bool((top_ks_t <= 1).all()),
        is_any_greedy=bool((top_ks_t <= 1).any()),
        need_top_p_sampling=any(p != 1.0 for p in top_ps),
        need_top_k_sampling=any(k != TOP_K_ALL for k in top_ks),
        need_min_p_sampling=any(m > 0 for m in min_ps),
        vocab_size=vocab,
        logit_bias=logit_bias,
        sampling_seed=seed,
    )


def _plain_sampler_distribution(probs, top_ks, top_ps, min_ps, need_min_p):
    """The distribution SGLang's plain sampler (pytorch backend) draws from, scattered back."""
    _ids, filtered, order, _w = top_k_top_p_min_p_sampling_from_probs_torch(
        probs.clone(), top_ks, top_ps, min_ps, need_min_p, None, torch.zeros(len(probs), dtype=torch.int64),
        return_filtered_probs=True,
    )  # fmt: skip
    out = torch.zeros_like(probs).scatter_(1, order.long(), filtered)
    return out / out.sum(-1, keepdim=True)


@pytest.mark.parametrize("case", range(200))
def test_target_probs_equal_the_plain_samplers(case):
    rng = random.Random(SEED * 7 + case)
    g = torch.Generator().manual_seed(case)
    bs, width, vocab = rng.randint(1, 6), rng.randint(1, 9), rng.randint(2, 300)
    temps = [rng.choice([0.3, 0.6, 1.0, 1.7]) for _ in range(bs)]
    top_ps = [rng.choice([1.0, 0.95, 0.9, 0.5, 0.1]) for _ in range(bs)]
    top_ks = [rng.choice([TOP_K_ALL, 1, 2, 5, 40, vocab + 3]) for _ in range(bs)]
    min_ps = [rng.choice([0.0, 0.0, 0.05, 0.3]) for _ in range(bs)]
    bias = None
    if rng.random() < 0.4:
        bias = torch.zeros((bs, vocab))
        bias[:, rng.randrange(vocab)] = rng.choice([-5.0, 3.0, 10.0])
    info = sampling_info(temps, top_ps, top_ks, min_ps, vocab, logit_bias=bias)
    logits = torch.randn((bs * width, vocab), generator=g) * rng.choice([0.5, 2.0, 6.0])
    adjusted = logits.clone()
    apply_dflash_verify_logits_adjustments(next_token_logits=adjusted, sampling_info=info, draft_token_num=width)
    got = U.ddtree_sampling_target_probs(adjusted, info, width)
    rep = lambda t: torch.repeat_interleave(t.reshape(-1), width, dim=0)  # noqa: E731
    biased = logits + (bias.repeat_interleave(width, dim=0) if bias is not None else 0.0)
    probs = torch.softmax(biased / rep(info.temperatures)[:, None], dim=-1)
    want = _plain_sampler_distribution(
        probs, rep(info.top_ks), rep(info.top_ps), rep(info.min_ps), info.need_min_p_sampling
    )
    assert got.shape == (bs, width, vocab)
    torch.testing.assert_close(got.view(bs * width, vocab), want, atol=2e-6, rtol=1e-5)


def _murmur_interpreted(seed, positions, col_indices):
    """SGLang's murmur_hash32 Triton kernel on CPU tensors (TRITON_INTERPRET=1); on CPU SGLang
    would call sgl_kernel's C++ op, which this venv does not have."""
    out = torch.empty((seed.shape[0], col_indices.shape[0]), dtype=torch.uint32)
    grid = (seed.shape[0], triton.cdiv(col_indices.shape[0], 1024))
    murmur_hash.murmur_hash32_kernel[grid](seed, positions, col_indices, out, seed.shape[0], col_indices.shape[0],
                                           BLOCK_SIZE=1024)  # fmt: skip
    return out


def test_seeded_coins_are_sglangs_and_reproducible(monkeypatch):
    """With a sampling seed (deterministic inference) the coins are SGLang's seeded verify
    coins: a function of (seed, committed length, node), distinct per node and per step."""
    if DEVICE_IS_CPU:
        monkeypatch.setattr(murmur_hash, "murmur_hash32", _murmur_interpreted)

    info = sampling_info([1.0, 1.0], [1.0, 1.0], [TOP_K_ALL] * 2, [0.0, 0.0], 16,
                         seed=torch.tensor([42, 7], dtype=torch.int64))  # fmt: skip
    prefix = torch.tensor([100, 37])
    coins, final = U.ddtree_verify_coins(info, prefix, 17)
    want_coins, want_final = _seeded_verify_coins(sampling_seed=info.sampling_seed, seq_lens=prefix,
                                                  draft_token_num=17, device=prefix.device)  # fmt: skip
    assert torch.equal(coins, want_coins) and torch.equal(final, want_final)
    again, _ = U.ddtree_verify_coins(info, prefix, 17)
    assert torch.equal(coins, again)
    later, _ = U.ddtree_verify_coins(info, prefix + 3, 17)
    assert not torch.equal(coins, later)
    assert coins.shape == (2, 17) and len(set(coins[0].tolist())) == 17 and float(coins.max()) < 1.0


def test_greedy_rows_of_a_mixed_batch_keep_the_greedy_walk():
    """In a batch that mixes greedy and sampled requests, the greedy rows get exactly
    ddtree_greedy_walk's accept path and bonus (whatever the coins), the sampled rows the
    sampled walk's."""
    rng = random.Random(SEED + 5)
    g = torch.Generator().manual_seed(SEED + 5)
    for _ in range(50):
        bs = rng.randint(2, 12)
        tree, vocab = _tree_batch(rng, g, bs)
        width = tree.width
        logits = torch.randn((bs * width, vocab), generator=g) * 3
        greedy = [rng.random() < 0.5 for _ in range(bs)]
        info = sampling_info([1.0 if gr else 0.8 for gr in greedy], [1.0 if gr else 0.9 for gr in greedy],
                             [1 if gr else TOP_K_ALL for gr in greedy], [0.0] * bs, vocab)  # fmt: skip
        coins = (torch.rand((bs, width), generator=g), torch.rand((bs,), generator=g))
        index, length, bonus = U.ddtree_sample_verify(tree, logits, info, torch.zeros(bs, dtype=torch.int64),
                                                      coins=coins)  # fmt: skip
        g_index, g_len, g_bonus = U.ddtree_greedy_walk(tree, logits.argmax(-1).view(bs, width))
        s_index, s_len, s_bonus = U.ddtree_sampled_walk(tree, U.ddtree_sampling_target_probs(logits, info, width),
                                                        *coins)  # fmt: skip
        for b in range(bs):
            want = (g_index, g_len, g_bonus) if greedy[b] else (s_index, s_len, s_bonus)
            assert index[b].tolist() == want[0][b].tolist()
            assert int(length[b]) == int(want[1][b]) and int(bonus[b]) == int(want[2][b])


# ---- 3. in distribution, on the toy target ----------------------------------------------------
def _keys_of_tree(tree, a, b, c, length):
    """(last, before, before that, length) of every verify token's context: the committed
    sequence (ending with the root) plus the node's path."""
    parents = tree.parents.clamp_min(0)
    tokens = tree.tokens
    col = torch.arange(tree.width)[None, :]
    na = tokens
    nb = torch.where(col == 0, b[:, None], tokens.gather(1, parents))
    grand = tokens.gather(1, parents.gather(1, parents))
    depth = tree.depths
    nc = torch.where(depth == 0, c[:, None], torch.where(depth == 1, b[:, None], grand))
    return na, nb, nc, length[:, None] + depth


def _drafter_topk(a, b, c, length, g):
    """A drafter that knows the target along its own greedy path, with noise: per depth the
    top-K of the target's logits there plus Gumbel noise (a random but good tree)."""
    lps, ids = [], []
    for _ in range(BLOCK - 1):
        logits = lm.target_logits_torch(a, b, c, length)
        noisy = logits - torch.log(-torch.log(torch.rand(logits.shape, generator=g).clamp_min(1e-12)))
        lp, tok = U.ddtree_topk_logprobs(noisy, TOPK)
        lps.append(lp)
        ids.append(tok)
        nxt = logits.argmax(-1)
        a, b, c, length = nxt, a, b, length + 1
    return torch.stack(lps, 1), torch.stack(ids, 1)


def _start(prompt_ids, n):
    """Per row: the last three tokens and the length of the committed sequence."""
    rows = []
    for p in prompt_ids:
        rows.append(lm.context_keys(list(PROMPTS[p])))
    t = torch.tensor(rows, dtype=torch.int64).repeat_interleave(n, dim=0)
    return t[:, 0], t[:, 1], t[:, 2], t[:, 3]


def ddtree_generate(temperature, top_p, *, n, sampler=None, seed, prompt_ids=(0, 1)):
    """n DDTree generations per prompt of the first N_TOKENS tokens, the worker's sequence
    of series functions per step. Returns [rows, N_TOKENS] tokens and the prompt of each row."""
    torch.manual_seed(seed)  # ddtree_verify_coins draws with torch.rand
    g = torch.Generator().manual_seed(seed + 1)
    prompt_ids = list(prompt_ids)
    rows = n * len(prompt_ids)
    a, b, c, length = _start(prompt_ids, n)
    out = torch.zeros((rows, N_TOKENS + BLOCK), dtype=torch.int64)
    count = torch.zeros((rows,), dtype=torch.int64)
    info = sampling_info([temperature] * rows, [top_p] * rows, [TOP_K_ALL] * rows, [0.0] * rows, lm.VOCAB)
    steps = accepted = 0
    while bool((count < N_TOKENS).any()):
        lp, ids = _drafter_topk(a, b, c, length, g)
        tree = U.build_ddtree_batch(a, lp, ids, BUDGET)
        keys = _keys_of_tree(tree, a, b, c, length)
        logits = lm.target_logits_torch(*(k.reshape(-1) for k in keys))
        apply_dflash_verify_logits_adjustments(next_token_logits=logits, sampling_info=info,
                                               draft_token_num=tree.width)  # fmt: skip
        index, accept_len, bonus = U.ddtree_sample_verify(tree, logits, info, length, sampler=sampler)
        committed, commit_lens = U.ddtree_commit_tokens(tree, index, accept_len, bonus, BLOCK)
        commit_lens = commit_lens.to(torch.int64)
        j = torch.arange(BLOCK)[None, :]
        dst = (count[:, None] + j).clamp_max(out.shape[1] - 1)
        keep = (j < commit_lens[:, None]) & (count[:, None] + j < out.shape[1])
        out.scatter_(1, dst, torch.where(keep, committed, out.gather(1, dst)))
        ext = torch.cat([torch.stack([c, b, a], 1), committed], 1)
        last = commit_lens + 2
        a, b, c = (ext.gather(1, (last - k)[:, None]).squeeze(1) for k in range(3))
        length = length + commit_lens
        count = count + commit_lens
        steps += 1
        accepted += int(accept_len.sum())
    return out[:, :N_TOKENS], torch.tensor(prompt_ids).repeat_interleave(n), steps, accepted / (rows * steps)


def autoregressive_generate(temperature, top_p, *, n, seed):
    """n plain generations per prompt: SGLang's sampler (pytorch backend), one token at a time."""
    torch.manual_seed(seed)
    prompt_ids = list(range(len(PROMPTS)))
    rows = n * len(prompt_ids)
    a, b, c, length = _start(prompt_ids, n)
    toks = []
    for _ in range(N_TOKENS):
        probs = torch.softmax(lm.target_logits_torch(a, b, c, length) / temperature, dim=-1)
        nxt = top_k_top_p_min_p_sampling_from_probs_torch(
            probs, torch.full((rows,), TOP_K_ALL, dtype=torch.int32), torch.full((rows,), top_p), torch.zeros(rows),
            False, None, length,
        ).to(torch.int64)  # fmt: skip
        toks.append(nxt)
        a, b, c, length = nxt, a, b, length + 1
    return torch.stack(toks, 1), torch.tensor(prompt_ids).repeat_interleave(n)


def exact_distribution(prompt, temperature, top_p):
    """{first N_TOKENS tokens: probability}, enumerated with SGLang's plain sampler's filter."""
    seqs = {(): 1.0}
    for _ in range(N_TOKENS):
        items = list(seqs.items())
        keys = torch.tensor([lm.context_keys(list(prompt) + list(s)) for s, _ in items], dtype=torch.int64)
        probs = torch.softmax(lm.target_logits_torch(*keys.T) / temperature, dim=-1).to(torch.float64)
        rows = len(items)
        dist = _plain_sampler_distribution(
            probs, torch.full((rows,), TOP_K_ALL), torch.full((rows,), top_p, dtype=torch.float64),
            torch.zeros(rows, dtype=torch.float64), False,
        )  # fmt: skip
        seqs = {}
        for (s, p), row in zip(items, dist, strict=True):
            for tok in torch.nonzero(row).flatten().tolist():
                seqs[(*s, tok)] = p * float(row[tok])
    return seqs


def _bonus_from_the_unadjusted_target(**kw):
    """PLANTED BUG: the bonus drawn from the whole target at the last accepted node (the
    rejected children's mass not removed), with the same final coin."""
    U.ddtree_tree_sampling_target_only_torch(**kw)
    bs, width = kw["candidates"].shape
    probs = kw["target_probs"].reshape(bs * width, -1)
    last = kw["accept_index"].to(torch.int64).gather(1, kw["accept_token_num"].to(torch.int64)[:, None]).squeeze(1)
    cdf = torch.cumsum(probs[last], dim=-1)
    u = kw["uniform_samples_for_final_sampling"] * cdf[:, -1]
    bonus = (cdf <= u[:, None]).sum(-1).clamp_max(probs.shape[-1] - 1)
    kw["predicts"][last] = bonus.to(kw["predicts"].dtype)


def _one_coin_for_every_node(**kw):
    """PLANTED BUG: the root's coin reused at every node of the walk."""
    coins = kw["uniform_samples"]
    kw["uniform_samples"] = coins[:, :1].expand_as(coins).contiguous()
    U.ddtree_tree_sampling_target_only_torch(**kw)


def _report(label, result):
    return f"{label}: {result.describe()}"


@pytest.fixture(scope="module")
def exact():
    return {(p, t): exact_distribution(PROMPTS[p], t, 0.9) for p in range(len(PROMPTS)) for t in (0.6, 1.0)}


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_ddtree_sampling_equals_plain_sampling(temperature, exact):
    started = time.monotonic()
    tree_tokens, tree_prompt, steps, per_step = ddtree_generate(temperature, 0.9, n=SAMPLES, seed=SEED)
    ar_tokens, ar_prompt = autoregressive_generate(temperature, 0.9, n=SAMPLES, seed=SEED + 2)
    lines, failed = [], []
    for p in range(len(PROMPTS)):
        dd, ar = tree_tokens[tree_prompt == p], ar_tokens[ar_prompt == p]
        gof_dd = X.goodness_of_fit(dd.tolist(), exact[(p, temperature)])
        gof_ar = X.goodness_of_fit(ar.tolist(), exact[(p, temperature)])
        hom = X.homogeneity(dd.tolist(), ar.tolist())
        for label, result in ((f"prompt {p} DDTree vs exact", gof_dd), (f"prompt {p} plain vs exact", gof_ar),
                              (f"prompt {p} DDTree vs plain", hom)):  # fmt: skip
            lines.append(_report(label, result))
            if result.rejects(ALPHA):
                failed.append(lines[-1])
    print(
        f"\nT={temperature} top_p=0.9, {SAMPLES} samples per prompt and method, first {N_TOKENS} tokens; DDTree "
        f"B={BLOCK} budget={BUDGET} topk={TOPK}: {steps} steps, {per_step:.2f} accepted drafts per request-step; "
        f"{time.monotonic() - started:.1f} s\n  " + "\n  ".join(lines)
    )
    assert len(tree_tokens) == len(ar_tokens) == SAMPLES * len(PROMPTS)
    assert per_step > 0.5, "too few accepts: the tree would barely be tested"
    assert not failed, failed


@pytest.mark.parametrize(
    ("bug", "sampler"),
    [("bonus from the unadjusted target", _bonus_from_the_unadjusted_target),
     ("one coin reused at every node", _one_coin_for_every_node)],
)  # fmt: skip
def test_planted_bug_is_caught(bug, sampler, exact):
    """The same generation (the first prompt, T = 1.0 top_p 0.9, SAMPLES samples) with a planted
    bug in the tree sampling: the goodness-of-fit test above must reject it at ALPHA."""
    started = time.monotonic()
    tokens, _prompt, _steps, _rate = ddtree_generate(1.0, 0.9, n=SAMPLES, sampler=sampler, seed=SEED + 3,
                                                     prompt_ids=(0,))  # fmt: skip
    result = X.goodness_of_fit(tokens.tolist(), exact[(0, 1.0)])
    print(f"\nPLANTED BUG ({bug}), T=1.0, prompt 0: {_report('DDTree vs exact', result)}; "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip
    assert result.rejects(ALPHA), f"the planted bug ({bug}) was not caught: {result}"
