"""Property tests of sglang/srt/speculative/ddtree_utils.py (patched tree).

Each property runs ROUNDS (>= 1000) seeded random rounds; DDTREE_ROUNDS
overrides the count (never below 1000 in CI).
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import random
import types
from pathlib import Path

import pytest
import sglang.srt.runtime_context as rc
import torch
from sglang.kernels.ops.speculative.dflash import compute_dflash_correct_drafts_and_bonus
from sglang.srt.speculative import ddtree_utils as U
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

ROUNDS = max(int(os.environ.get("DDTREE_ROUNDS", "1000")), 1)
DEVICE = os.environ.get("DDTREE_TEST_DEVICE", "cpu")


def _sorted_logprobs(rng: random.Random, depths: int, k: int, vocab: int):
    """Per-depth top-k (log-probs descending, distinct ids) of random logits."""
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))
    logits = torch.randn((depths, vocab), generator=g) * rng.choice([0.5, 2.0, 5.0])
    return U.ddtree_topk_logprobs(logits, k)


def _path(parents, i):
    out = []
    while i > 0:
        out.append(i)
        i = parents[i]
    return out[::-1]


def test_round_count():
    assert ROUNDS >= 1000, "the property tests must run at least 1000 rounds"


def test_tree_structure_budget_topk_cap_and_best_first():
    rng = random.Random(1234)
    brute_checked = 0
    for _ in range(ROUNDS):
        depths = rng.randint(1, 8)
        cap = rng.randint(1, 6)
        vocab = rng.randint(cap, 40)
        budget = rng.randint(1, 48)
        lp, _ids = _sorted_logprobs(rng, depths, cap, vocab)
        k = lp.shape[1]
        assert k == min(cap, vocab)  # topk cap respected by the candidate table
        parents, dep, ranks = U.build_tree_nodes(lp.tolist(), budget)
        total = sum(k**d for d in range(1, depths + 1))
        n = len(parents)
        assert n == min(budget, total)
        # verify index of node j is j + 1; parent 0 is the root
        full_par = [-1, *parents]
        full_dep = [0, *dep]
        seen = set()
        for j in range(1, n + 1):
            p = full_par[j]
            assert 0 <= p < j, "parent index must precede the child"
            assert full_dep[j] == full_dep[p] + 1, "prefix-closed: parent is one level up"
            assert 0 <= ranks[j - 1] < k, "rank beyond the topk cap"
            key = (p, ranks[j - 1])
            assert key not in seen, "duplicate sibling"
            seen.add(key)
            assert 1 <= full_dep[j] <= depths
        children = {}
        for j in range(1, n + 1):
            children.setdefault(full_par[j], []).append(j)
        assert all(len(c) <= k for c in children.values()), "more children than the topk cap"
        # scores: best-first = the n best prefixes (brute force when small)
        scores = []
        for j in range(1, n + 1):
            scores.append(sum(float(lp[full_dep[i] - 1, ranks[i - 1]]) for i in _path(full_par, j)))
        # pops come out best first
        assert all(scores[i] >= scores[i + 1] - 1e-4 for i in range(n - 1))
        if total <= 400:
            every = []
            for d in range(1, depths + 1):
                for combo in itertools.product(range(k), repeat=d):
                    every.append(sum(float(lp[t, r]) for t, r in enumerate(combo)))
            every.sort(reverse=True)
            got = sorted(scores, reverse=True)
            for a, b in zip(got, every[:n], strict=True):
                assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-4)
            brute_checked += 1
    assert brute_checked >= ROUNDS // 4


def test_batch_layout_lists_ancestors_positions_mask():
    rng = random.Random(99)
    for _ in range(ROUNDS):
        bs = rng.randint(1, 4)
        depths = rng.randint(1, 7)
        cap = rng.randint(1, 4)
        budget = rng.randint(1, 24)
        vocab = rng.randint(cap, 30)
        lps, idss = zip(*(_sorted_logprobs(rng, depths, cap, vocab) for _ in range(bs)), strict=True)
        lp, ids = torch.stack(lps), torch.stack(idss)
        roots = torch.randint(0, vocab, (bs,))
        tree = U.build_ddtree_batch(roots, lp, ids, budget)
        width = budget + 1
        assert tree.tokens.shape == (bs, width) and tree.width == U.ddtree_target_verify_width(budget)
        for name in ("tokens", "parents", "depths", "valid", "ancestors", "retrieve_index",
                     "retrieve_next_token", "retrieve_next_sibling"):  # fmt: skip
            assert getattr(tree, name).is_contiguous(), f"{name} must be contiguous (kernels assume row stride D)"
        # host-built lists and ancestors == their device-side (torch) equivalents
        assert torch.equal(tree.ancestors, U.ddtree_ancestor_matrix(tree.parents, depths))
        nt, ns = U.ddtree_child_sibling_lists(tree.parents, tree.valid)
        assert torch.equal(tree.retrieve_next_token, nt) and torch.equal(tree.retrieve_next_sibling, ns)
        prefix = torch.randint(0, 12, (bs,))
        pos = U.ddtree_positions(tree.depths, prefix).view(bs, width)
        mask = U.pack_ddtree_mask(tree.ancestors, prefix)
        indptr = U.ddtree_mask_indptr(prefix, width)
        assert int(indptr[-1]) == mask.numel()
        for b in range(bs):
            n = int(tree.num_nodes[b])
            par = tree.parents[b].tolist()
            dep = tree.depths[b].tolist()
            tok = tree.tokens[b].tolist()
            assert tok[0] == int(roots[b]) and par[0] == -1 and dep[0] == 0
            assert tree.valid[b].tolist() == [i <= n for i in range(width)]
            for i in range(1, n + 1):
                assert tok[i] == int(ids[b, dep[i] - 1, tree_rank(lp[b], ids[b], dep[i], tok[i])])
            # ancestors: row i = i and its ancestor chain (padding: root + itself)
            for i in range(width):
                expect = {0, i} | set(_path(par, i)) if i <= n else {0, i}
                row = {j for j in range(width) if bool(tree.ancestors[b, i, j])}
                assert row == expect
            # first-child / next-sibling lists over real nodes only
            kids = {i: [j for j in range(1, n + 1) if par[j] == i] for i in range(width)}
            for i in range(width):
                first = tree.retrieve_next_token[b, i].item()
                assert first == (kids[i][0] if (i <= n and kids[i]) else -1)
            for j in range(1, width):
                sib = tree.retrieve_next_sibling[b, j].item()
                if j > n:
                    assert sib == -1
                    continue
                later = [x for x in kids[par[j]] if x > j]
                assert sib == (later[0] if later else -1)
            assert tree.retrieve_index[b].tolist() == [b * width + i for i in range(width)]
            assert pos[b].tolist() == [int(prefix[b]) + d for d in dep]
            # packed mask block: [D, P + D], prefix all True, tree = ancestors
            p = int(prefix[b])
            block = mask[int(indptr[b]) : int(indptr[b + 1])].view(width, p + width)
            assert bool(block[:, :p].all())
            assert torch.equal(block[:, p:], tree.ancestors[b])


def tree_rank(lp_b, ids_b, depth, token):
    row = ids_b[depth - 1].tolist()
    return row.index(token)


def _greedy_reference(vocab: int, rng: random.Random):
    """A deterministic 'target': next token from the last two tokens."""
    table = {}

    def f(seq):
        key = (seq[-2] if len(seq) > 1 else -1, seq[-1])
        if key not in table:
            table[key] = rng.randrange(vocab)
        return table[key]

    return f


def test_walk_equals_greedy_decoding_by_reference_target():
    rng = random.Random(7)
    deep = 0
    for _ in range(ROUNDS):
        bs = rng.randint(1, 3)
        depths = rng.randint(1, 7)
        cap = rng.randint(1, 4)
        budget = rng.randint(1, 32)
        vocab = rng.randint(max(cap, 3), 12)
        f = _greedy_reference(vocab, rng)
        contexts, greedy, lps, idss = [], [], [], []
        for _b in range(bs):
            ctx = [rng.randrange(vocab) for _ in range(rng.randint(1, 5))]
            g, seq = [], list(ctx)
            for _ in range(depths + 1):
                t = f(seq)
                g.append(t)
                seq.append(t)
            # drafter: the greedy token is in the candidates with some probability
            lp_rows, id_rows = [], []
            for d in range(depths):
                cand = rng.sample(range(vocab), min(cap, vocab))
                if g[d] not in cand and rng.random() < 0.75:
                    cand[rng.randrange(len(cand))] = g[d]
                vals = sorted((rng.uniform(-6, 0) for _ in cand), reverse=True)
                lp_rows.append(vals)
                id_rows.append(cand)
            contexts.append(ctx)
            greedy.append(g)
            lps.append(lp_rows)
            idss.append(id_rows)
        lp = torch.tensor(lps, dtype=torch.float32)
        ids = torch.tensor(idss, dtype=torch.int64)
        roots = torch.tensor([c[-1] for c in contexts])
        tree = U.build_ddtree_batch(roots, lp, ids, budget)
        width = budget + 1
        predict = torch.zeros((bs, width), dtype=torch.int64)
        for b in range(bs):
            par, tok = tree.parents[b].tolist(), tree.tokens[b].tolist()
            for i in range(width):
                path = [tok[j] for j in _path(par, i)] if bool(tree.valid[b, i]) else [tok[i]]
                predict[b, i] = f(contexts[b] + path)
        accept_index, accept_len, bonus = U.ddtree_greedy_walk(tree, predict)
        out, commit = U.ddtree_commit_tokens(tree, accept_index, accept_len, bonus, depths + 1)
        for b in range(bs):
            a = int(accept_len[b])
            # output == greedy decoding of the reference target
            assert out[b, : a + 1].tolist() == greedy[b][: a + 1]
            assert int(commit[b]) == a + 1
            # maximal: no real node continues the greedy path one level deeper
            par, tok, n = tree.parents[b].tolist(), tree.tokens[b].tolist(), int(tree.num_nodes[b])
            longest = 0
            for i in range(1, n + 1):
                pt = [tok[j] for j in _path(par, i)]
                if pt == greedy[b][: len(pt)]:
                    longest = max(longest, len(pt))
            assert a == longest
            deep += a >= 2
            # accepted path gather (fixed size): kept entries move the visited nodes to rows 0..a,
            # the rest are the root's self-move
            src, dst, keep = U.ddtree_accepted_path_gather(accept_index[b : b + 1], accept_len[b : b + 1], width)
            kept = keep.reshape(-1)
            assert src.numel() == dst.numel() == depths + 1 and kept.tolist() == [t <= a for t in range(depths + 1)]
            assert dst[kept].tolist() == list(range(a + 1))
            assert [tok[i] for i in src[kept].tolist()[1:]] == greedy[b][:a]
            assert all(s >= d for s, d in zip(src.tolist(), dst.tolist(), strict=True))
            assert src[~kept].tolist() == dst[~kept].tolist() == [0] * int((~kept).sum())
    assert deep > ROUNDS // 10, "too few deep acceptances: the property is not exercised"


def _dflash_commit_accept():
    """DFLASH's _commit_accept, read from the unpatched part of the worker."""
    path = Path(U.__file__).with_name("dflash_worker_v2.py")
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_commit_accept")
    ns = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), ns)
    return ns["_commit_accept"]


def test_chain_tree_topk1_is_dflash_linear_acceptance():
    commit_accept = _dflash_commit_accept()
    rng = random.Random(2024)
    for _ in range(ROUNDS):
        bs = rng.randint(1, 5)
        block = rng.randint(2, 9)
        depths = block - 1
        budget = rng.randint(depths, depths + 12)  # the chain fits; budget+1 may differ from B
        vocab = rng.randint(2, 6)
        lp = torch.sort(torch.rand(bs, depths, 1) * -3, dim=-1, descending=True).values
        ids = torch.randint(0, vocab, (bs, depths, 1))
        roots = torch.randint(0, vocab, (bs,))
        tree = U.build_ddtree_batch(roots, lp, ids, budget)
        # topk 1: a chain, node d at verify index d
        assert tree.num_nodes.tolist() == [depths] * bs
        assert tree.parents[:, 1:block].tolist() == [list(range(depths))] * bs
        width = budget + 1
        predict = torch.randint(0, vocab, (bs, width))
        # bias towards matches so long acceptances happen
        for b in range(bs):
            for d in range(depths):
                if rng.random() < 0.7:
                    predict[b, d] = tree.tokens[b, d + 1]
        accept_index, accept_len, bonus = U.ddtree_greedy_walk(tree, predict)
        ref_len, ref_bonus = compute_dflash_correct_drafts_and_bonus(
            candidates=tree.tokens[:, :block].contiguous(), target_predict=predict[:, :block].contiguous()
        )
        assert accept_len.tolist() == ref_len.tolist()
        assert bonus.tolist() == ref_bonus.tolist()
        out, commit = U.ddtree_commit_tokens(tree, accept_index, accept_len, bonus, block)
        ref_out, ref_commit = commit_accept(tree.tokens[:, :block], ref_len, ref_bonus)
        # metrics parity: the scheduler sees the same accept_lens (commit) and tokens
        assert commit.tolist() == ref_commit.tolist()
        for b in range(bs):
            c = int(commit[b])
            assert out[b, :c].tolist() == ref_out[b, :c].tolist()


class _StandInGroup:
    """all_gather_into_tensor answers with every rank's precomputed partials
    (values, ids, logsumexp, in the order the function gathers them)."""

    def __init__(self, parts):
        self.parts = parts
        self.world_size = len(parts)
        self.calls = 0

    def all_gather_into_tensor(self, out, inp):
        which = self.calls % 3
        self.calls += 1
        assert inp.shape == self.parts[0][which].shape
        out.copy_(torch.cat([p[which] for p in self.parts], dim=0))


def test_tp_topk_merge_equals_full_vocab_topk():
    rng = random.Random(31337)
    for r in range(ROUNDS):
        vocab = rng.randint(4, 300)
        k = rng.randint(1, min(vocab, 16))
        ranks = rng.randint(1, 8)
        n = rng.randint(1, 6)
        g = torch.Generator().manual_seed(r)
        logits = torch.randn((n, vocab), generator=g) * rng.choice([1.0, 4.0, 12.0])
        ref_lp, ref_ids = U.ddtree_topk_logprobs(logits, k)
        if rng.random() < 0.5:  # even shards, as a vocab-parallel head pads them
            step = -(-vocab // ranks)
            cuts = [min(i * step, vocab) for i in range(ranks + 1)]
        else:  # uneven shards, some narrower than k (or empty)
            cuts = sorted([0, vocab, *(rng.randint(0, vocab) for _ in range(ranks - 1))])
        parts = [U.vocab_parallel_topk_partial(logits[:, a:b], k, a) for a, b in itertools.pairwise(cuts) if b > a]
        vals = torch.stack([p[0] for p in parts])
        ids = torch.stack([p[1] for p in parts])
        lse = torch.stack([p[2] for p in parts])
        got_lp, got_ids = U.merge_vocab_parallel_topk(vals, ids, lse, k)
        assert torch.equal(got_ids, ref_ids)
        assert torch.allclose(got_lp, ref_lp, atol=1e-5, rtol=1e-5)
        if r % 50 == 0:
            # the all-gather path, through a stand-in process group
            cut0 = cuts[1] if cuts[1] > 0 else vocab
            group = _StandInGroup(parts)
            lp2, ids2 = U.vocab_parallel_topk_logprobs(logits[:, :cut0], k, 0, tp_group=group)
            assert torch.equal(ids2, ref_ids) and torch.allclose(lp2, ref_lp, atol=1e-5)


def test_widths_and_verify_field_checks():
    for block, budget in [(8, 8), (8, 16), (16, 32), (4, 3), (8, 64)]:
        assert U.ddtree_target_verify_width(budget) == budget + 1
        assert U.ddtree_draft_width(block) == block
        assert U.ddtree_max_draft_tokens(block, budget) == max(block, budget + 1)
    mask = torch.ones(4, dtype=torch.bool)
    U.check_ddtree_verify_fields(
        has_draft_tokens=True, custom_mask=mask, num_tokens_per_req=9, draft_token_num=9, budget=8
    )
    with pytest.raises(ValueError, match="requires the packed tree mask"):
        U.check_ddtree_verify_fields(
            has_draft_tokens=True, custom_mask=None, num_tokens_per_req=9, draft_token_num=9, budget=8
        )
    with pytest.raises(ValueError, match="width mismatch"):
        U.check_ddtree_verify_fields(
            has_draft_tokens=True, custom_mask=mask, num_tokens_per_req=8, draft_token_num=9, budget=8
        )
    with pytest.raises(ValueError, match="budget \\+ 1"):
        U.check_ddtree_verify_fields(
            has_draft_tokens=True, custom_mask=mask, num_tokens_per_req=8, draft_token_num=8, budget=8
        )
    # capture dummy (no draft tokens yet) may carry the runner's buffer
    U.check_ddtree_verify_fields(
        has_draft_tokens=False, custom_mask=mask, num_tokens_per_req=9, draft_token_num=9, budget=8
    )


def test_state_fields(monkeypatch):
    spec = types.SimpleNamespace(
        speculative_ddtree_budget=16, speculative_ddtree_topk_cap=4, speculative_num_draft_tokens=8
    )
    monkeypatch.setattr(rc, "get_spec", lambda: spec)
    fields = U.ddtree_state_fields(SpeculativeAlgorithm.DFLASH)
    assert fields == {"ddtree": {"budget": 16, "topk_cap": 4, "target_verify_width": 17, "draft_width": 8}}
    assert U.ddtree_state_fields(SpeculativeAlgorithm.EAGLE) == {}
    spec.speculative_ddtree_budget = None
    assert U.ddtree_state_fields(SpeculativeAlgorithm.DFLASH) == {}


@pytest.mark.skipif(DEVICE == "cpu", reason="device tensors: GPU run only (run-gpu-kernel-tests.sh)")
def test_device_tensors_match_cpu():
    rng = random.Random(11)
    dev = torch.device(DEVICE)
    for _ in range(200):
        bs, depths, cap, budget = rng.randint(1, 8), rng.randint(1, 7), rng.randint(1, 4), rng.randint(1, 64)
        lps, idss = zip(*(_sorted_logprobs(rng, depths, cap, 50) for _ in range(bs)), strict=True)
        lp, ids = torch.stack(lps), torch.stack(idss)
        roots = torch.randint(0, 50, (bs,))
        prefix = torch.randint(0, 64, (bs,))
        a = U.build_ddtree_batch(roots, lp, ids, budget)
        b = U.build_ddtree_batch(roots.to(dev), lp.to(dev), ids.to(dev), budget)
        names = ("tokens", "parents", "depths", "valid", "ancestors", "retrieve_next_token", "retrieve_next_sibling")
        for name in names:
            assert torch.equal(getattr(a, name), getattr(b, name).cpu()), name
        mask_b = U.pack_ddtree_mask(b.ancestors, prefix.to(dev)).cpu()
        assert torch.equal(U.pack_ddtree_mask(a.ancestors, prefix), mask_b)
        pred = torch.randint(0, 50, (bs, budget + 1))
        wa, wb = U.ddtree_greedy_walk(a, pred), U.ddtree_greedy_walk(b, pred.to(dev))
        for x, y in zip(wa, wb, strict=True):
            assert torch.equal(x, y.cpu())
