"""The verify window lies inside the request's own KV allocation.

The worker writes KV for req_to_token[row, P : P + max(B, D)] each decode step
(draft block B, tree verify D = budget + 1). These checks replay decode steps
through SGLang's own reservation code and kernels (patches/tools/kv_window_sim.py:
the patched tree's DFlashDraftInputV2.prepare_for_decode, alloc_for_spec_decode,
TokenToKVPoolAllocator, ReqToTokenPool, the Triton assign_req_to_token_pool and
assign_extend_cache_locs kernels under TRITON_INTERPRET=1), with overlap and
non-overlap scheduling, row reuse, B in {8, 16}, and check window <= allocation,
that every window slot is the request's own, and that the worker-side invariant
fires exactly when it is not.

The same replay with 0.5.23's own prepare_for_decode (the reservation the
series had before the fix: it left dflash_info_v2.py unpatched) must overrun:
that is the bug, kept as a regression check. Run against the series at the
commit before the fix, `test_window_inside_allocation_*` fail.

DDTREE_KV_CASES raises the number of random replays (default 16).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))

import kv_window_sim as S  # noqa: E402
import series  # noqa: E402
import torch  # noqa: E402
from sglang.srt.mem_cache.allocation_sizing import (  # noqa: E402
    get_req_to_token_extra_context_len,
    page_aligned_decode_alloc_lens,
)
from sglang.srt.runtime_context import use_context  # noqa: E402
from sglang.srt.speculative import ddtree_utils as U  # noqa: E402

CASES = int(os.environ.get("DDTREE_KV_CASES", "16"))
BLOCKS = (8, 16)
BUDGET_SWEEP = range(1, 4097)  # the arithmetic sweep; replays draw from 1..256


def _invariant():
    check = getattr(U, "ddtree_check_kv_window", None)
    assert check is not None, "the series has no worker-side KV window invariant (ddtree_check_kv_window)"
    return check


def _replay(case, **kw):
    """The replay, with the series' invariant where it has one (the window is checked either way)."""
    return S.simulate(case, invariant=getattr(U, "ddtree_check_kv_window", None), **kw)


@pytest.fixture(scope="module")
def pristine_draft_input():
    return S.load_pristine_draft_input(series.fetch_wheel())


def _report(out: S.Outcome) -> str:
    c = out.case
    return (
        f"B={c.block} budget={c.budget} overlap={c.overlap} running={c.max_running} steps={c.steps} "
        f"seed={c.seed}: {out.overrun_steps}/{out.request_steps} request-steps past the allocation "
        f"(max {out.max_overrun}), foreign slots {out.foreign_slots}, unowned slots {out.free_slots}, "
        f"row overflows {out.row_overflows}; first: {out.first_violation}"
    )


def _case_id(c):
    return f"b{c.block}-t{c.budget}-{'overlap' if c.overlap else 'sync'}"


# The bundle's command line (B=8, budget 16) and the widest shapes, both schedulers.
FIXED = [
    S.Case(8, 16, True, max_running=16, steps=24, seed=11, accept_prob=0.9),
    S.Case(8, 16, False, max_running=16, steps=24, seed=12, accept_prob=0.9),
    S.Case(16, 32, True, max_running=8, steps=24, seed=13, accept_prob=1.0),
    S.Case(8, 8, True, max_running=8, steps=24, seed=14, accept_prob=1.0),
]


@pytest.mark.parametrize("case", FIXED, ids=_case_id)
def test_window_inside_allocation_fixed(case):
    out = _replay(case)
    assert out.window_inside_allocation, _report(out)
    _invariant()
    assert out.invariant_raised == 0, _report(out)
    assert out.rows_reused > 0 and out.request_steps >= 100, _report(out)


def _random_cases(n: int) -> list[S.Case]:
    rng = random.Random(20261)
    cases = []
    for _ in range(n):
        block = rng.choice(BLOCKS)
        budget = rng.choice(
            [1, block - 1, block, block + 1, 2 * block, rng.randint(1, 256), int(2 ** rng.uniform(0, 8))]
        )
        cases.append(
            S.Case(
                block, max(1, budget), rng.random() < 0.6, max_running=rng.randint(1, 16), steps=rng.randint(10, 18),
                seed=rng.randrange(1 << 30), accept_prob=rng.choice([0.3, 0.8, 1.0]),
                near_context_end=rng.choice([0.0, 0.3, 1.0]), context_len=rng.choice([96, 192]),
            )
        )  # fmt: skip
    return cases


@pytest.mark.parametrize("case", _random_cases(CASES), ids=lambda c: f"b{c.block}-t{c.budget}-s{c.seed % 1000}")
def test_window_inside_allocation_random(case):
    out = _replay(case)
    assert out.window_inside_allocation, _report(out)
    _invariant()
    assert out.invariant_raised == 0 and out.invariant_missed == 0, _report(out)


@pytest.mark.parametrize("case", FIXED[:3], ids=_case_id)
def test_0523_reservation_overruns_and_the_invariant_stops_it(case, pristine_draft_input):
    """0.5.23's 2 * B reservation with the tree's window: the bug, found by the same replay."""
    out = S.simulate(case, draft_input_cls=pristine_draft_input, invariant=_invariant())
    assert out.overrun_steps > 0 and not out.window_inside_allocation, _report(out)
    # the invariant fires on every step with an overrun, never without one
    assert out.invariant_raised > 0 and out.invariant_missed == 0 and out.invariant_false_alarms == 0, _report(out)


def test_requests_reach_the_context_end_and_fit_the_row():
    """Requests running to max_req_len allocate up to the last columns of their req_to_token row."""
    case = S.Case(16, 64, True, max_running=4, steps=40, seed=5, accept_prob=1.0, near_context_end=1.0, context_len=96)
    out = _replay(case)
    assert out.window_inside_allocation, _report(out)
    assert out.min_row_margin is not None and out.min_row_margin <= 8, out.min_row_margin


def test_plain_dflash_reservation_fits_the_row():
    """Plain DFLASH keeps 0.5.23's 2 * B reservation; its req_to_token row now holds it at the context end
    (0.5.23's 4 + B headroom did not: the tail went into the next request's row)."""
    case = S.Case(16, None, False, max_running=4, steps=40, seed=6, accept_prob=1.0, near_context_end=1.0,
                  context_len=96)  # fmt: skip
    out = _replay(case)
    assert out.window_inside_allocation, _report(out)
    assert out.min_row_margin is not None and out.min_row_margin <= 8, out.min_row_margin


class _Kv:
    def __init__(self, committed: int, allocated: int) -> None:
        self.kv_committed_len = committed
        self.kv_allocated_len = allocated


class _Req:
    def __init__(self, committed: int, allocated: int) -> None:
        self.kv = _Kv(committed, allocated)


@pytest.mark.parametrize("block", BLOCKS)
def test_every_budget_reserves_the_worst_case(block):
    """SGLang's page_aligned_decode_alloc_lens with the series' reservation, every budget 1..4096,
    at the worst case: the host lags by the largest commit (overlap) or not at all."""
    bad = []
    for budget in BUDGET_SWEEP:
        reserve = U.ddtree_decode_kv_reserve(block, budget)
        width = U.ddtree_kv_window_width(block, budget)
        for lag in (0, U.ddtree_max_commit(block, budget)):
            committed = 1000
            _, nxt, _ = page_aligned_decode_alloc_lens([_Req(committed, committed)], reserve=reserve, page_size=1)
            if committed + lag + width > nxt[0]:
                bad.append((budget, lag, committed + lag + width - nxt[0]))
    assert not bad, bad[:10]
    assert U.ddtree_decode_kv_reserve(block, None) == 2 * block  # plain DFLASH keeps 0.5.23's reservation
    assert U.ddtree_decode_kv_reserve(block, block - 1) == 2 * block


HEADROOM = [(8, 1), (8, 16), (16, 16), (16, 32), (8, 255), (8, None), (16, None)]


@pytest.mark.parametrize(("block", "budget"), HEADROOM)
def test_row_headroom_holds_the_reservation(block, budget):
    with use_context(S.resolved_context(block, budget)):
        extra = get_req_to_token_extra_context_len()
    assert extra >= 4 + U.ddtree_decode_kv_reserve(block, budget)


def test_invariant_messages_and_edges():
    check = _invariant()
    check(torch.tensor([10, 20]), torch.tensor([27, 37]), 17)  # P + W == allocated: inside
    with pytest.raises(RuntimeError, match=r"batch row 1 would write KV slots 20\.\.36 .* owns 36 \(1 past"):
        check(torch.tensor([10, 20]), torch.tensor([27, 36]), 17)
    with pytest.raises(RuntimeError, match="needs host copies"):
        check(None, torch.tensor([1]), 17)
    with pytest.raises(RuntimeError, match="2 committed lengths but 1 allocated"):
        check(torch.tensor([1, 2]), torch.tensor([40]), 17)


def test_overlap_bound_without_host_lengths():
    """Under overlap the host has no P: it checks the committed length it reserved from plus
    the most one step commits, and says so; with P it checks P."""
    bound = U.ddtree_prefix_upper_bound_cpu
    assert bound(None, None, 8) == (None, False)
    p, exact = bound(torch.tensor([10, 20]), torch.tensor([3, 4]), 8)
    assert exact and p.tolist() == [10, 20]  # P itself wins when the host has it
    p, exact = bound(None, torch.tensor([3, 4]), 8)
    assert not exact and p.tolist() == [11, 12]
    check = _invariant()
    check(p, torch.tensor([28, 29]), 17, exact=False)  # 11 + 17 <= 28, 12 + 17 <= 29
    with pytest.raises(RuntimeError, match=r"batch row 1 may write \(committed length plus the step in flight\)"):
        check(p, torch.tensor([28, 28]), 17, exact=False)
    # the device-side twin: P itself, no sync (on CPU it raises at once)
    U.ddtree_assert_kv_window_async(torch.tensor([10, 11]), torch.tensor([27, 28]), 17)
    with pytest.raises(RuntimeError, match="device check"):
        U.ddtree_assert_kv_window_async(torch.tensor([10, 12]), torch.tensor([27, 28]), 17)
    assert U.ddtree_mask_numel_bound(None, 17) is None
    assert U.ddtree_mask_numel_bound(torch.tensor([11, 12]), 17) == 17 * (11 + 17) + 17 * (12 + 17)
