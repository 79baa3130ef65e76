"""The verify buffers that grow with D = budget + 1 are sized, logged and refused at startup.

The figures (ddtree_static_buffers) are checked against what the patched
TritonAttnBackend.init_cuda_graph_state really allocates (run on CPU tensors
with a stand-in backend object; torch.cuda.mem_get_info replaced by a given
free figure), and the refusal against the free memory it reads.

The CUDA-graph verify-mask buffer holds the tree mask of every decode step: at
the context end, with a full batch under overlap scheduling, the mask the
worker sizes from its host bound reaches past context_len (replayed through
SGLang's reservation code, patches/tools/kv_window_sim.py). Against the series
before the fix (the buffer sized with context_len),
test_mask_buffer_holds_every_step_at_the_context_end fails.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from sglang.srt.layers.attention import triton_backend as TB
from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
from sglang.srt.runtime_context import use_context
from sglang.srt.speculative import ddtree_utils as U

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))

import kv_window_sim as S  # noqa: E402

BLOCK = 8


def _row_width(ctx, budget, block=BLOCK):
    """The req_to_token row the server allocates: context_len + the headroom for the reservation."""
    with use_context(S.resolved_context(block, budget)):
        return ctx + get_req_to_token_extra_context_len()


def _backend(budget, *, ctx=512, heads=4, splits=8, v_head_dim=16, max_bs=4, block=BLOCK):
    return types.SimpleNamespace(
        dllm_attention=None, ddtree_budget=budget, device="cpu", max_context_len=ctx, num_head=heads,
        max_kv_splits=splits, v_head_dim=v_head_dim, swa_v_head_dim=None, lean_total_programs=1, lean_block_m=1,
        is_draft_runner=False, skip_prefill=False,
        verify_mask_num_tokens=U.ddtree_target_verify_width(budget) if budget else block,
        sliding_window_size=None, use_sliding_window_kv_pool=False, num_draft_tokens=block,
        req_to_token=torch.empty((max_bs + 1, _row_width(ctx, budget, block)), dtype=torch.int32),
    )  # fmt: skip


def _allocate(monkeypatch, budget, free_bytes, max_bs=4, **shape):
    backend = _backend(budget, max_bs=max_bs, **shape)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free_bytes, 2 * free_bytes))
    width = backend.verify_mask_num_tokens
    TB.TritonAttnBackend.init_cuda_graph_state(backend, max_bs, max_bs * width)
    return backend


def _nbytes(t):
    return t.numel() * t.element_size()


@pytest.mark.parametrize(("budget", "max_bs", "ctx"), [(16, 4, 512), (4, 2, 300), (63, 3, 1024)])
def test_figures_equal_what_the_backend_allocates(monkeypatch, budget, max_bs, ctx):
    backend = _allocate(monkeypatch, budget, 1 << 40, max_bs=max_bs, ctx=ctx)
    prefix = U.ddtree_mask_prefix_capacity(_row_width(ctx, budget), BLOCK, budget)
    figures = U.ddtree_static_buffers(
        cuda_graph=True, max_bs=max_bs, width=budget + 1, context_len=ctx, num_heads=4, max_kv_splits=8, v_head_dim=16,
        mask_prefix_len=prefix,
    )  # fmt: skip
    assert prefix > ctx  # past the context: the step in flight and the overlap bound
    assert figures.kv_indices == _nbytes(backend.cuda_graph_kv_indices)
    assert figures.verify_mask == _nbytes(backend._verify_mask.buffer)
    partials = _nbytes(backend.cuda_graph_attn_logits) + _nbytes(backend.cuda_graph_attn_lse)
    assert figures.attn_partials == partials + _nbytes(backend.cuda_graph_num_kv_splits)


def test_a_budget_that_does_not_fit_is_refused_before_allocating(monkeypatch):
    need = U.ddtree_static_buffers(
        cuda_graph=True, max_bs=4, width=17, context_len=512, num_heads=4, max_kv_splits=8, v_head_dim=16,
        mask_prefix_len=U.ddtree_mask_prefix_capacity(_row_width(512, 16), BLOCK, 16),
    ).total
    free = int(need / U.DDTREE_STATIC_BUFFER_SHARE) - 1  # one byte short
    with pytest.raises(ValueError, match=r"--speculative-ddtree-budget 16 does not fit: CUDA-graph verify buffers "
                                         r"for D=17, max bs 4, context 512: kv indices .* The largest budget that "
                                         r"fits is 15"):  # fmt: skip
        _allocate(monkeypatch, 16, free)
    backend = _allocate(monkeypatch, 16, free + 2)  # just enough
    assert backend.cuda_graph_kv_indices.numel() == 4 * 17 * 512


def test_plain_dflash_is_not_sized_here(monkeypatch):
    backend = _allocate(monkeypatch, None, 1)  # would be refused if DDTree sizing ran
    assert backend.cuda_graph_kv_indices.numel() == 4 * 8 * 512


SHAPES = [
    dict(cuda_graph=True, max_bs=64, context_len=262144, num_heads=8, max_kv_splits=8, v_head_dim=512),
    dict(cuda_graph=True, max_bs=8, context_len=4096, num_heads=32, max_kv_splits=16, v_head_dim=128),
    dict(cuda_graph=False, max_bs=48, context_len=262144),
    dict(cuda_graph=False, max_bs=1, context_len=1024),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("limit_gib", [0.001, 1, 20, 200])
def test_largest_fitting_budget_is_the_boundary(shape, limit_gib):
    limit = limit_gib * (1 << 30)
    n = U.ddtree_largest_fitting_budget(limit, **shape)
    total = lambda b: U.ddtree_static_buffers(width=b + 1, **shape).total  # noqa: E731
    if n == 0:
        assert total(1) > limit
    else:
        assert total(n) <= limit < total(n + 1)
    assert all(total(b) < total(b + 1) for b in range(1, 300, 7))  # monotonic


def test_eager_figure_is_the_packed_mask_of_a_full_batch():
    f = U.ddtree_static_buffers(cuda_graph=False, max_bs=3, width=17, context_len=100)
    assert (f.kv_indices, f.attn_partials) == (0, 0)
    prefix = torch.full((3,), 100, dtype=torch.int64)
    assert f.verify_mask == int(U.ddtree_mask_indptr(prefix, 17)[-1])  # what pack_ddtree_mask fills


MASK_CASES = [
    # full batches (max_running = the CUDA-graph max bs) running to the end of the context;
    # True: a step there needs more than a buffer sized with context_len holds (the edge)
    (S.Case(16, 32, True, max_running=1, steps=40, seed=21, accept_prob=1.0, near_context_end=1.0, context_len=96),
     True),
    (S.Case(8, 16, True, max_running=1, steps=60, seed=25, accept_prob=1.0, near_context_end=1.0, context_len=96),
     True),
    (S.Case(8, 16, True, max_running=2, steps=60, seed=22, accept_prob=1.0, near_context_end=1.0, context_len=96),
     False),
    (S.Case(16, 64, True, max_running=4, steps=80, seed=23, accept_prob=0.9, near_context_end=1.0, context_len=128),
     False),
    (S.Case(8, 16, False, max_running=2, steps=60, seed=24, accept_prob=1.0, near_context_end=1.0, context_len=96),
     False),
]  # fmt: skip


@pytest.mark.parametrize(("case", "edge"), MASK_CASES, ids=lambda c: f"b{c.block}-t{c.budget}-bs{c.max_running}-"
                         f"{'overlap' if c.overlap else 'sync'}" if isinstance(c, S.Case) else str(c))  # fmt: skip
def test_mask_buffer_holds_every_step_at_the_context_end(monkeypatch, case, edge):
    """Every step's packed tree mask, sized as the worker sizes it from host lengths, fits the
    CUDA-graph verify-mask buffer the patched backend allocates for max bs = the running batch."""
    out = S.simulate(case, invariant=U.ddtree_check_kv_window)
    assert out.window_inside_allocation and out.invariant_raised == 0
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 40, 1 << 41))
    backend = _backend(case.budget, ctx=case.context_len, max_bs=case.max_running, block=case.block)
    TB.TritonAttnBackend.init_cuda_graph_state(backend, case.max_running, case.max_running * (case.budget + 1))
    capacity = backend._verify_mask.buffer.numel()
    width = case.budget + 1
    by_context = case.max_running * width * (case.context_len + width)
    print(f"{case}: largest mask {out.max_mask_numel}, buffer {capacity} (context_len sizing {by_context})")
    assert out.max_mask_numel <= capacity, (
        f"a step's tree mask of {out.max_mask_numel} entries does not fit the verify-mask buffer of {capacity}"
    )
    if edge:
        assert out.max_mask_numel > by_context  # the edge is reached: sizing with context_len would not hold it
