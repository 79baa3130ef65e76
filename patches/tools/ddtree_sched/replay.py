"""Replay a DDTree workload through SGLang's scheduler and the patched worker on CPU.

``run(case)`` parses and resolves the bundle's DDTree command line with the
patched sglang (overlap scheduling on, SGLang's default, or
``--disable-overlap-schedule``), builds SGLang's ``Scheduler`` around the
patched ``DFlashWorkerV2`` (``scheduler``, ``worker``), sends it requests and
runs its event loop until every request has finished. Then it checks:

- every greedy request's output equals the target's greedy continuation of
  its prompt (``lm.greedy_continuation``, computed independently); every
  sampled request's tokens after the first (the stand-in prefill's is greedy)
  lie in the support of the target's distribution after its prefix
  (temperature and top_p, SGLang's plain sampler's filter);
- no KV read found another request's KV, an unwritten slot or a wrong
  position (target and draft caches), no tree node saw a wrong mask;
- every decode step's window ``req_to_token[row, P : P + max(B, D)]`` lies
  inside the request's allocation and holds only slots no other live
  request, the radix cache or the free list has;
- at the end, no slot leaked: free + cached == the pool.

Workload: requests arrive over time, some extend an earlier prompt (radix
cache hits: prefix sharing), prompts longer than the chunked-prefill size
(chunked prefill), some run to the end of the context, rows are reused as
requests finish, and the KV pool is small enough that decode retracts
requests (plus SGLang's own SGLANG_TEST_RETRACT hook every few steps).
"""

# ruff: noqa: PLC0415 -- torch/sglang come from the CPU venv and the patched tree on sys.path

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Iterator
from typing import Any

from . import lm
from . import scheduler as SCH
from . import worker as W


@dataclasses.dataclass(frozen=True)
class Case:
    block: int = 8
    budget: int = 16
    overlap: bool = True
    requests: int = 24
    max_running: int = 8
    context_len: int = 192
    kv_tokens: int = 1400  # small: decode retracts requests
    chunked_prefill: int = 48
    agree: float = 0.85  # drafter: the target's token ranks first with this probability per depth
    retract_every: int = 0  # SGLang's TEST_RETRACT hook: retract every N forwards (0: off)
    seed: int = 0
    sampled: float = 0.0  # share of requests sent with temperature / top_p (the rest greedy)
    temperature: float = 1.0
    top_p: float = 0.9

    @property
    def window(self) -> int:
        return max(self.block, self.budget + 1)

    def argv(self) -> list[str]:
        argv = [
            "--model-path", "/models/target", "--device", "cuda",
            "--speculative-draft-model-path", "/models/drafter",
            "--speculative-dflash-block-size", str(self.block),
            "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", str(self.budget),
            "--speculative-ddtree-topk-cap", "4",
            "--chunked-prefill-size", str(self.chunked_prefill),
            "--max-running-requests", str(self.max_running),
            "--context-length", str(self.context_len),
        ]  # fmt: skip
        return argv if self.overlap else [*argv, "--disable-overlap-schedule"]


@dataclasses.dataclass
class Outcome:
    case: Case
    decode_steps: int = 0
    decode_steps_without_host_lens: int = 0  # overlap: resolve_seq_lens_cpu left seq_lens_cpu None
    request_steps: int = 0
    accepts_by_depth: dict[int, int] = dataclasses.field(default_factory=dict)
    kv_moves: int = 0
    retractions: int = 0
    chunked_prefills: int = 0
    prefix_hit_tokens: int = 0
    rows_reused: int = 0
    near_context_end: int = 0
    finished: int = 0
    outputs_equal_reference: int = 0  # greedy requests equal to the target's greedy continuation
    sampled_requests: int = 0
    sampled_in_support: int = 0  # sampled requests whose every token the target could sample
    sampled_off_greedy: int = 0  # sampled tokens that differ from the greedy continuation
    sampled_decode_steps: int = 0  # decode steps whose batch was not all greedy
    output_mismatch: str | None = None
    overruns: int = 0
    foreign_slots: int = 0
    unowned_slots: int = 0
    window_violation: str | None = None
    kv: lm.KVErrors = dataclasses.field(default_factory=lm.KVErrors)
    leaked_slots: int = 0
    iterations: int = 0
    reqs: list[Any] = dataclasses.field(default_factory=list, repr=False)  # SGLang's Req objects
    sent: list[Any] = dataclasses.field(default_factory=list, repr=False)  # what the detokenizer got

    @property
    def deep_accepts(self) -> int:
        return sum(n for d, n in self.accepts_by_depth.items() if d >= 2)

    @property
    def clean(self) -> bool:
        return (
            len(self.reqs) > 0
            and self.finished == len(self.reqs)
            and self.outputs_equal_reference + self.sampled_in_support == self.finished
            and self.overruns == self.foreign_slots == self.unowned_slots == 0
            and self.kv.total == 0
            and self.leaked_slots == 0
        )


class _Windows:
    """Checks each verify's KV window against who owns what at that moment."""

    def __init__(self, out: Outcome, r: W.Runners, tree_cache: Any, live: Any) -> None:
        self.out, self.r, self.tree_cache, self.live = out, r, tree_cache, live

    def __call__(self, batch: Any, prefix: list[int]) -> None:
        import torch

        out, r = self.out, self.r
        width = out.case.window
        rows = r.req_to_token_pool.req_to_token
        free = set(r.allocator.free_pages.tolist()) | set(r.allocator.release_pages.tolist())
        cached = set(self.tree_cache.all_values_flatten().tolist()) if self.tree_cache.total_size() else set()
        owners: dict[int, Any] = {}
        for req in self.live():
            idx = req.kv.req_pool_idx
            if idx is not None:
                for slot in rows[idx, : req.kv.kv_allocated_len].tolist():
                    owners.setdefault(slot, []).append(req)
        out.decode_steps += 1
        if batch.seq_lens_cpu is None:
            out.decode_steps_without_host_lens += 1
        if batch.sampling_info is not None and not batch.sampling_info.is_all_greedy:
            out.sampled_decode_steps += 1
        for req, p in zip(batch.reqs, prefix, strict=True):
            out.request_steps += 1
            over = p + width - req.kv.kv_allocated_len
            if over > 0:
                out.overruns += 1
                self._note(f"{req.rid}: window {p}..{p + width - 1} past its allocation {req.kv.kv_allocated_len}")
            window = rows[req.kv.req_pool_idx, p : p + width].to(torch.int64).tolist()
            for slot in window:
                others = [o for o in owners.get(slot, []) if o is not req]
                if others or slot in cached:
                    out.foreign_slots += 1
                    self._note(
                        f"{req.rid}: window slot {slot} also held by {[o.rid for o in others] or 'the radix cache'}"
                    )
                elif slot in free:
                    out.unowned_slots += 1
                    self._note(f"{req.rid}: window slot {slot} is free")

    def _note(self, text: str) -> None:
        if self.out.window_violation is None:
            self.out.window_violation = text


def _workload(case: Case, rng: random.Random, max_req_len: int) -> list[tuple[int, Any]]:
    """(arrival iteration, request) pairs."""
    prompts: list[list[int]] = []
    out = []
    for i in range(case.requests):
        if prompts and rng.random() < 0.35:  # extends an earlier prompt: a radix cache hit
            base = rng.choice(prompts)
            prompt = base[: rng.randint(max(1, len(base) // 2), len(base))]
            prompt = prompt + [rng.randrange(lm.VOCAB - 1) for _ in range(rng.randint(1, 24))]
        else:
            prompt = [rng.randrange(lm.VOCAB - 1) for _ in range(rng.randint(4, 2 * case.chunked_prefill + 20))]
        prompt = prompt[: max_req_len - 8]
        prompts.append(prompt)
        room = max_req_len - 1 - len(prompt)
        max_new = room if rng.random() < 0.25 else rng.randint(1, max(1, min(room, 48)))
        sampling = {}
        if case.sampled and rng.random() < case.sampled:  # no draw for all-greedy workloads: they stay as they were
            sampling = {"temperature": case.temperature, "top_p": case.top_p}
        out.append((i * 2 + rng.randint(0, 3), SCH.request(f"req{i}", prompt, max_new, **sampling)))
    return sorted(out, key=lambda t: t[0])


# SGLang's own checks after every iteration (as in the GPU proof).
_CHECKS_ENV = {"SGLANG_CHECK_KV_PAGE_INVARIANTS": "1", "SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY": "1"}


@contextlib.contextmanager
def _cpu_device_stand_ins(case: Case) -> Iterator[None]:
    """CPU tensors have no stream lifetimes (``record_stream``); SGLang's Triton
    ``assign_extend_cache_locs`` is taken on its CUDA branch and interpreted; the
    TEST_RETRACT hook is SGLang's own (SGLANG_TEST_RETRACT); SGLang's memory and
    KV page invariant checks run after every iteration."""
    import torch
    from sglang.kernels.ops.speculative import cache_locs
    from sglang.srt.managers import scheduler as sched_mod

    saved_env = {k: os.environ.get(k) for k in _CHECKS_ENV}
    os.environ.update(_CHECKS_ENV)
    saved = (torch.Tensor.record_stream, cache_locs._is_cuda, sched_mod.TEST_RETRACT, sched_mod.TEST_RETRACT_INTERVAL)
    original = torch.Tensor.record_stream

    def record_stream(t: Any, stream: Any) -> Any:
        return None if t.device.type == "cpu" else original(t, stream)

    torch.Tensor.record_stream = record_stream  # type: ignore[method-assign]
    cache_locs._is_cuda = True
    sched_mod.TEST_RETRACT = case.retract_every > 0
    sched_mod.TEST_RETRACT_INTERVAL = max(case.retract_every, 1)
    undo = W.install_verify_stand_in()
    try:
        yield
    finally:
        undo()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        torch.Tensor.record_stream = saved[0]  # type: ignore[method-assign]
        cache_locs._is_cuda, sched_mod.TEST_RETRACT, sched_mod.TEST_RETRACT_INTERVAL = saved[1:]


def run(case: Case, *, requests: list[tuple[int, Any]] | None = None, max_iterations: int = 5000) -> Outcome:
    """Replay ``case`` (its generated workload, or ``requests``: (arrival
    iteration, TokenizedGenerateReqInput) pairs) until every request finished."""
    import torch
    from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.runtime_context import use_context

    from .context import scheduler_context, single_rank

    server_args, ctx = scheduler_context(case)
    out = Outcome(case)
    with use_context(ctx), _cpu_device_stand_ins(case):
        single_rank()
        row_width = case.context_len + get_req_to_token_extra_context_len()
        req_pool = ReqToTokenPool(
            size=case.max_running, max_context_len=row_width, device="cpu", enable_memory_saver=False
        )
        pool = lm.ToyPool(case.kv_tokens)
        allocator = TokenToKVPoolAllocator(case.kv_tokens, torch.float32, "cpu", pool, False)
        cache = RadixCache(CacheInitParams(disable=False, req_to_token_pool=req_pool,
                                           token_to_kv_pool_allocator=allocator, page_size=1))  # fmt: skip
        r = W.Runners(req_pool, allocator, pool, case.context_len)
        r.errors = out.kv
        worker = W.build_worker(r, block=case.block, agree=case.agree, seed=case.seed)
        s = SCH.build_scheduler(server_args, r, worker, tree_cache=cache, pool_rows=case.max_running)
        r.live = lambda: [q for q in s.made_reqs if q.kv.req_pool_idx is not None]
        r.on_window = _Windows(out, r, cache, r.live)
        rng = random.Random(case.seed)
        arrivals = sorted(requests, key=lambda t: t[0]) if requests is not None else _workload(case, rng, s.max_req_len)
        counters: dict[str, int] = {}
        rows_used: set[int] = set()
        first_row: dict[str, int] = {}
        for it in range(max_iterations):
            while arrivals and arrivals[0][0] <= it:
                s.handle_generate_request(arrivals.pop(0)[1])
            batch, result = SCH.loop_once(s, counters)
            _observe(out, batch, result, rows_used=rows_used, first_row=first_row)
            if (
                not arrivals
                and batch is None
                and not s.waiting_queue
                and s.running_batch.is_empty()
                and not s.result_queue
            ):
                out.iterations = it + 1
                break
        _settle(out, s, r, cache=cache, allocator=allocator, case=case)
    return out


def _observe(out: Outcome, batch: Any, result: Any, *, rows_used: set[int], first_row: dict[str, int]) -> None:
    if batch is None:
        return
    if batch.forward_mode.is_extend():
        out.chunked_prefills += int(batch.chunked_req is not None)
    for req in batch.reqs:
        idx = req.kv.req_pool_idx
        if idx is not None and req.rid not in first_row:
            first_row[req.rid] = idx
            out.rows_reused += int(idx in rows_used)
            rows_used.add(idx)
    if result is not None and batch.forward_mode.is_decode() and result.accept_lens is not None:
        for commit in result.accept_lens.tolist():
            out.accepts_by_depth[int(commit) - 1] = out.accepts_by_depth.get(int(commit) - 1, 0) + 1


def _sampled_check(req: Any) -> tuple[int, str | None]:
    """(tokens that differ from the greedy continuation, the first token the target could
    not have sampled after its prefix, or None). The first output token comes from the
    stand-in prefill, which decodes greedily; the rest from DDTree decode steps."""
    import torch
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch

    seq, outputs = list(req.origin_input_ids), list(req.output_ids)
    sp = req.sampling_params
    off, outside = 0, None
    for j, tok in enumerate(outputs):
        logits = lm.target_logits(seq)
        if j > 0:
            probs = torch.softmax(logits / sp.temperature, dim=-1)[None]
            _ids, kept, order, _w = top_k_top_p_min_p_sampling_from_probs_torch(
                probs, torch.tensor([sp.top_k]), torch.tensor([sp.top_p]), torch.tensor([sp.min_p]),
                sp.min_p > 0, None, torch.zeros(1, dtype=torch.int64), return_filtered_probs=True,
            )  # fmt: skip
            support = set(order[0][kept[0] > 0].tolist())
            off += int(tok != int(logits.argmax()))
            if tok not in support and outside is None:
                outside = f"token {j} ({tok}) outside the target's support {sorted(support)} after its prefix"
        seq.append(tok)
    return off, outside


def _settle(out: Outcome, s: Any, r: W.Runners, *, cache: Any, allocator: Any, case: Case) -> None:
    out.kv_moves = r.pool.moved_rows
    out.accepts_by_depth = dict(sorted(out.accepts_by_depth.items()))
    for req in s.made_reqs:
        out.finished += int(req.finished())
        out.retractions += int(getattr(req, "retraction_count", 0))
        out.prefix_hit_tokens += int(getattr(req, "cached_tokens", 0) or 0)
        out.near_context_end += int(len(req.origin_input_ids) + len(req.output_ids) >= s.max_req_len - 1)
        ref = lm.greedy_continuation(list(req.origin_input_ids), len(req.output_ids))
        complete = len(req.output_ids) >= req.sampling_params.max_new_tokens
        if req.sampling_params.top_k != 1:
            out.sampled_requests += 1
            off, outside = _sampled_check(req)
            out.sampled_off_greedy += off
            if outside is None and complete:
                out.sampled_in_support += 1
            elif out.output_mismatch is None:
                out.output_mismatch = f"{req.rid} (sampled): {outside or 'incomplete'}"
            continue
        if list(req.output_ids) == ref and complete:
            out.outputs_equal_reference += 1
        elif out.output_mismatch is None:
            out.output_mismatch = (
                f"{req.rid}: {len(req.output_ids)} tokens (max_new_tokens {req.sampling_params.max_new_tokens}), "
                f"first {list(req.output_ids)[:8]} vs the target's {ref[:8]}"
            )
    used = case.kv_tokens - allocator.available_size()
    out.leaked_slots = used - int(cache.total_size())
    out.reqs = list(s.made_reqs)
    out.sent = list(s.ipc_channels.send_to_detokenizer.sent)
