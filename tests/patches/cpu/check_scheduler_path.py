"""DDTree under SGLang's own scheduler: overlap scheduling (the default) and
--disable-overlap-schedule, with retraction, chunked prefill, row reuse,
prefix sharing and requests that run to the end of the context.

patches/tools/ddtree_sched replays workloads through SGLang's Scheduler
(handle_generate_request, get_next_batch_to_run with PrefillAdder and
retract_decode, run_batch with FutureMap.resolve_seq_lens_cpu / publish,
process_batch_result with release_kv_cache into a RadixCache) and the patched
DFlashWorkerV2.forward_batch_generation, whose model forwards are token
arithmetic over real KV slots (the target's next token is a function of the
whole sequence it attends to). The attention backends are TritonAttnBackend:
decide_needs_cpu_seq_lens says False, so under overlap every decode step
reaches the worker with seq_lens_cpu None, as on a GPU.

Run against the series before the fix, test_replays_clean[*-overlap] fails
with "RuntimeError: DDTree needs the host copies of the committed and
allocated KV lengths ..." on the first overlap decode step.

DDTREE_SCHED_SEEDS adds random workloads per shape (default 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))

from ddtree_sched import replay as RP  # noqa: E402
from sglang.srt.speculative import dflash_info_v2, dflash_worker_v2  # noqa: E402

SEEDS = max(int(os.environ.get("DDTREE_SCHED_SEEDS", "1")), 1)
SHAPES = [
    # The bundle's command line (B 8, budget 16), a small pool so decode retracts.
    dict(block=8, budget=16, requests=24, kv_tokens=800, retract_every=4),
    # A verify window narrower than the draft block (budget + 1 < B) and a wide one.
    dict(block=8, budget=4, requests=16, kv_tokens=900, retract_every=5),
    dict(block=16, budget=32, requests=14, kv_tokens=1100, retract_every=6, context_len=256),
]
CASES = [
    RP.Case(overlap=overlap, seed=seed, **shape)
    for shape in SHAPES
    for seed in range(SEEDS)
    for overlap in (True, False)
]


def _id(c: RP.Case) -> str:
    return f"b{c.block}-t{c.budget}-s{c.seed}-{'overlap' if c.overlap else 'sync'}"


def _report(o: RP.Outcome) -> str:
    return (
        f"{_id(o.case)}: {o.finished}/{o.case.requests} finished, {o.outputs_equal_reference} equal the target "
        f"({o.output_mismatch}); window: {o.overruns} overruns, {o.foreign_slots} foreign, {o.unowned_slots} "
        f"unowned ({o.window_violation}); KV reads: {o.kv}; leaked {o.leaked_slots}"
    )


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_replays_clean(case):
    out = RP.run(case)
    assert out.clean, _report(out)
    assert len(out.reqs) == case.requests
    # It ran the scheduler path it claims to.
    assert out.decode_steps >= 20
    if case.overlap:
        assert out.decode_steps_without_host_lens == out.decode_steps, (
            "overlap steps must reach the worker without host lengths"
        )
    else:
        assert out.decode_steps_without_host_lens == 0
    assert out.retractions >= 1, "no request was retracted"
    assert out.chunked_prefills >= 1, "no prefill was chunked"
    assert out.prefix_hit_tokens > 0, "no request shared a cached prefix"
    assert out.rows_reused >= 1, "no req_to_token row was reused"
    assert out.near_context_end >= 1, "no request reached the end of the context"
    assert out.deep_accepts >= 20, f"too few accepts of depth >= 2: {out.accepts_by_depth}"
    print(
        f"{_id(case)}: {out.decode_steps} decode steps ({out.decode_steps_without_host_lens} without host lengths), "
        f"{out.request_steps} request-steps, accepts by depth {out.accepts_by_depth}, {out.kv_moves} KV rows moved, "
        f"{out.retractions} retractions, {out.chunked_prefills} chunked prefills, {out.prefix_hit_tokens} cached "
        f"prefix tokens, {out.rows_reused} rows reused, {out.near_context_end} at the context end"
    )


SAMPLED = [
    # The bundle's command line with half the requests sampled (the OpenAI client's default
    # temperature 1.0 with top_p 0.9), mixed with greedy ones in the same batches.
    RP.Case(block=8, budget=16, requests=20, kv_tokens=800, retract_every=4, overlap=overlap, sampled=0.5,
            temperature=1.0, top_p=0.9, seed=3)
    for overlap in (True, False)
]  # fmt: skip


@pytest.mark.parametrize("case", SAMPLED, ids=_id)
def test_sampled_requests_replay_clean(case):
    """Sampled requests (target-only tree sampling) in the same batches as greedy ones, through
    SGLang's scheduler: greedy outputs still equal the target's greedy continuation, every sampled
    token lies in the target's support after its own prefix, every KV read holds its own position
    (the accepted path's KV move and the draft write-back of sampled paths), every window inside
    the request's allocation; under overlap no step had host lengths."""
    out = RP.run(case)
    assert out.clean, _report(out)
    assert out.sampled_requests >= 5 and out.sampled_in_support == out.sampled_requests, _report(out)
    assert out.outputs_equal_reference == out.finished - out.sampled_requests
    assert out.sampled_decode_steps >= 10, "no decode step verified sampled requests"
    assert out.sampled_off_greedy >= 10, "the sampled requests decoded greedily"
    if case.overlap:
        assert out.decode_steps_without_host_lens == out.decode_steps
    assert out.deep_accepts >= 10, f"too few accepts of depth >= 2: {out.accepts_by_depth}"
    print(
        f"{_id(case)} sampled: {out.sampled_requests} sampled requests ({out.sampled_off_greedy} tokens off the "
        f"greedy continuation, all in the target's support), {out.sampled_decode_steps}/{out.decode_steps} decode "
        f"steps with sampled rows ({out.decode_steps_without_host_lens} without host lengths), accepts by depth "
        f"{out.accepts_by_depth}, {out.retractions} retractions"
    )


def _two_b_reservation(block, budget):
    return 2 * int(block)  # 0.5.23's DFLASH reservation, what the series had before patch 9


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "sync"])
def test_invariant_stops_a_real_overrun(monkeypatch, overlap):
    """With 0.5.23's 2 * B reservation the window overruns; the worker must stop
    before the write, in both schedulers, with its message."""
    monkeypatch.setattr(dflash_info_v2, "ddtree_decode_kv_reserve", _two_b_reservation)
    with pytest.raises(RuntimeError, match="DDTree KV window overrun"):
        RP.run(RP.Case(overlap=overlap, requests=8, retract_every=0))


def test_device_check_stops_an_overrun_the_host_bound_misses(monkeypatch):
    """Host check switched off: the device-side assert on P itself still stops it."""
    monkeypatch.setattr(dflash_info_v2, "ddtree_decode_kv_reserve", _two_b_reservation)
    monkeypatch.setattr(dflash_worker_v2, "ddtree_check_kv_window", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match="device check"):
        RP.run(RP.Case(overlap=True, requests=8, retract_every=0))


def test_replay_sees_overruns_when_nothing_stops_them(monkeypatch):
    """Both checks off and the old reservation: the replay itself must see the
    overruns (its detection is not vacuous)."""
    monkeypatch.setattr(dflash_info_v2, "ddtree_decode_kv_reserve", _two_b_reservation)
    monkeypatch.setattr(dflash_worker_v2, "ddtree_check_kv_window", lambda *a, **k: None)
    monkeypatch.setattr(dflash_worker_v2, "ddtree_assert_kv_window_async", lambda *a, **k: None)
    out = RP.run(RP.Case(overlap=True, requests=12, retract_every=0))
    assert out.overruns > 0 and not out.clean, _report(out)


def test_replay_sees_a_missing_kv_move(monkeypatch):
    """The accepted path's KV left where the tree verified it: later reads see
    the wrong positions and outputs diverge from the target."""
    real = dflash_worker_v2.ddtree_accepted_path_gather

    def no_move(accept_index, accept_len, width):
        _src, dst, keep = real(accept_index, accept_len, width)
        return dst, dst, keep

    monkeypatch.setattr(dflash_worker_v2, "ddtree_accepted_path_gather", no_move)
    out = RP.run(RP.Case(overlap=True, requests=8, retract_every=0))
    assert not out.clean and out.kv.target_wrong_token > 0, _report(out)
