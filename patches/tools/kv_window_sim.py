"""Replay DDTree decode steps through sglang 0.5.23's own KV reservation code.

What runs is SGLang's, from the package tree on ``sys.path`` (a pristine
0.5.23 tree with the series applied):

- the scheduler side of each decode step: ``DFlashDraftInputV2.prepare_for_decode``
  (``page_aligned_decode_alloc_lens`` -> ``alloc_for_spec_decode`` ->
  ``alloc_token_slots`` on a real ``TokenToKVPoolAllocator`` -> the Triton
  ``assign_req_to_token_pool`` kernel writing ``req_to_token``), under a
  runtime context published from a real parsed and resolved DDTree command
  line (``create_context`` / ``use_context``);
- the worker side: the KV window ``req_to_token[row, P : P + W]`` gathered with
  SGLang's Triton ``assign_extend_cache_locs`` kernel, as the patched worker
  does for the draft block (width B) and the tree verify (width D = budget + 1);
  W = max(B, D).
- the request rows: a real ``ReqToTokenPool`` (rows are reused as requests
  finish; a reused row keeps the previous owner's slot numbers past the new
  owner's allocation, as in SGLang).

What is modelled (the scheduler's bookkeeping around those calls): prompts
are prefilled into fresh slots; each decode step commits ``a`` tokens,
1 <= a <= min(B, D) (accepted nodes + bonus), drawn per request; under
overlap scheduling the host's committed length (``kv_committed_len``, what
``prepare_for_decode`` reads) lags the device's P by the step in flight, and a
request the host sees finished still ran that step; finished requests free
their slots and row. No prefix sharing (a chunk cache): every slot has one
owner.

Checked per request and step: ``P + W <= kv_allocated_len`` (the window lies
inside the allocation), every slot of the window is owned by the request
itself (not free, not another request's), and the allocation fits the
``req_to_token`` row. The worker-side invariant (``ddtree_check_kv_window``,
host lengths only) is called where the patched worker calls it and must raise
exactly when the window overruns.

Needs torch + triton (TRITON_INTERPRET=1 on CPU) and sglang's import-time
dependencies: run it in the CPU sglang venv (patches/tools/make-cpu-venv.sh).
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import random
import sys
import types
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

PRISTINE_INFO_V2 = "sglang/srt/speculative/dflash_info_v2.py"


@dataclasses.dataclass(frozen=True)
class Case:
    block: int
    budget: int | None  # None: plain DFLASH (verify width = block size)
    overlap: bool
    max_running: int = 16
    steps: int = 60
    seed: int = 0
    context_len: int = 256
    accept_prob: float = 0.8  # per depth: the chance the walk goes one node deeper
    near_context_end: float = 0.3  # share of requests whose prompt + max_new reaches the context limit

    @property
    def verify_width(self) -> int:
        return self.block if self.budget is None else self.budget + 1

    @property
    def window(self) -> int:
        return max(self.block, self.verify_width)

    @property
    def max_commit(self) -> int:
        return min(self.block, self.verify_width)


@dataclasses.dataclass
class Outcome:
    case: Case
    request_steps: int = 0
    overrun_steps: int = 0  # request-steps whose window reaches past the allocation
    max_overrun: int = 0  # slots past the allocation, worst request-step
    foreign_slots: int = 0  # window slots owned by another live request
    free_slots: int = 0  # window slots owned by nobody (freed or never allocated)
    row_overflows: int = 0  # allocations longer than the req_to_token row
    invariant_raised: int = 0  # steps the worker-side invariant stopped
    invariant_missed: int = 0  # steps with an overrun the invariant let through
    invariant_false_alarms: int = 0  # steps it raised without an overrun
    rows_reused: int = 0
    requests: int = 0
    min_row_margin: int | None = None  # req_to_token row width - largest allocation seen
    max_mask_numel: int = 0  # the largest packed tree mask one step sizes from host lengths (DDTree)
    first_violation: str | None = None

    @property
    def overrun_share(self) -> float:
        return self.overrun_steps / self.request_steps if self.request_steps else 0.0

    @property
    def window_inside_allocation(self) -> bool:
        return self.overrun_steps == 0 and self.foreign_slots == 0 and self.free_slots == 0 and self.row_overflows == 0


def bundle_argv(block: int, budget: int | None) -> list[str]:
    """The bundle's DDTree command line (roles/sglang_service) for a block size and budget
    (budget None: its plain DFLASH command line)."""
    argv = [
        "--model-path", "/models/target", "--device", "cuda",
        "--speculative-draft-model-path", "/models/drafter", "--speculative-dflash-block-size", str(block),
    ]  # fmt: skip
    if budget is None:
        # page size 1 as DDTree resolves it (the rest of resolution, which would
        # pick it for plain DFLASH, needs the model on disk)
        return [*argv, "--speculative-algorithm", "DFLASH", "--page-size", "1"]
    return [
        *argv, "--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", str(budget),
        "--speculative-ddtree-topk-cap", "4",
    ]  # fmt: skip


@contextlib.contextmanager
def draft_config_stub(block: int) -> Iterator[None]:
    """`handle_speculative_decoding` reads the drafter's config.json; stand one in."""
    name = "sglang.srt.utils.hf_transformers_utils"
    fake = types.ModuleType(name)
    fake.get_config = lambda *a, **k: types.SimpleNamespace(architectures=["DFlashDraftModel"], block_size=block)  # type: ignore[attr-defined]
    saved = sys.modules.get(name)
    sys.modules[name] = fake
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


def resolved_context(block: int, budget: int | None) -> Any:
    """A runtime context from the bundle's command line, parsed and resolved by the patched sglang."""
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.runtime_context import create_context
    from sglang.srt.server_args import prepare_server_args

    with draft_config_stub(block):
        args = prepare_server_args(bundle_argv(block, budget))
        speculative_hook.handle_speculative_decoding(args)
    # The rest of the pipeline needs the model on disk and a GPU; what the
    # reservation reads (the spec and schedule leaves) is resolved above.
    args._resolution_finished = True
    return create_context(args, role="scheduler")


def load_pristine_draft_input(wheel: Path) -> type:
    """0.5.23's own ``DFlashDraftInputV2`` (the file the series did not patch before the
    reservation fix), loaded from the pristine wheel next to the patched package."""
    with zipfile.ZipFile(wheel) as zf:
        source = zf.read(PRISTINE_INFO_V2).decode()
    spec = importlib.util.spec_from_loader("ddtree_pristine_dflash_info_v2", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    exec(compile(source, f"<pristine {PRISTINE_INFO_V2}>", "exec"), module.__dict__)
    return module.DFlashDraftInputV2  # type: ignore[no-any-return]


class _ChunkCache:
    """No prefix sharing: every slot has one owner (SGLang's ChunkCache behaviour)."""

    def __init__(self, allocator: Any) -> None:
        self.token_to_kv_pool_allocator = allocator

    def supports_prefix_sharing(self) -> bool:
        return False

    def pretty_print(self) -> None:
        pass


@dataclasses.dataclass(eq=False)
class _Req:
    rid: int
    prompt_len: int
    max_new: int
    kv: Any
    sampling_params: Any
    device_len: int = 0  # P: the committed length the worker sees
    in_flight: int = 0  # commit of the step the host has not processed yet (overlap)
    decode_batch_idx: int = 0

    def host_committed(self, overlap: bool) -> int:
        return self.device_len - (self.in_flight if overlap else 0)


class _Batch:
    """The ScheduleBatch fields prepare_for_decode reads."""

    def __init__(self, reqs: list[_Req], pool: Any, cache: _ChunkCache) -> None:
        import torch

        self.reqs = reqs
        self.device = "cpu"
        self.req_to_token_pool = pool
        self.tree_cache = cache
        self.token_to_kv_pool_allocator = cache.token_to_kv_pool_allocator
        self.hisparse_coordinator = None
        self.req_pool_indices = torch.tensor([r.kv.req_pool_idx for r in reqs], dtype=torch.int64)
        self.seq_lens_cpu: Any = None
        self.seq_lens_sum: Any = None

    def batch_size(self) -> int:
        return len(self.reqs)

    def maybe_evict_swa(self) -> None:
        pass


class _Sim:
    def __init__(self, case: Case, draft_input_cls: type, invariant: Callable[..., None] | None) -> None:
        import torch
        from sglang.srt.managers.schedule_batch import ReqKvInfo
        from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.sampling.sampling_params import SamplingParams

        self.torch = torch
        self.case = case
        self.rng = random.Random(case.seed)
        self.invariant = invariant
        self.ReqKvInfo = ReqKvInfo
        self.SamplingParams = SamplingParams
        self.row_width = case.context_len + get_req_to_token_extra_context_len()
        self.pool = ReqToTokenPool(
            size=case.max_running, max_context_len=self.row_width, device="cpu", enable_memory_saver=False
        )
        tokens = case.max_running * (self.row_width + 8) + 64
        allocator = TokenToKVPoolAllocator(tokens, torch.float16, "cpu", None, False)
        self.cache = _ChunkCache(allocator)
        self.owner = torch.full((tokens + 1,), -1, dtype=torch.int64)
        self.draft_input = draft_input_cls.create_idle_input(device=torch.device("cpu"))
        self.running: list[_Req] = []
        self.next_rid = 0
        self.rows_seen: set[int] = set()
        self.out = Outcome(case)

    # ---- scheduler side --------------------------------------------------------------
    def _admit(self) -> None:
        from sglang.srt.mem_cache.allocation import alloc_token_slots, assign_req_to_token_pool_func

        torch = self.torch
        case = self.case
        new: list[_Req] = []
        while len(self.running) + len(new) < case.max_running:
            prompt = self.rng.randint(1, case.context_len // 4)
            limit = case.context_len - 2 - prompt  # scheduler: prompt + max_new <= max_req_len - 1
            max_new = limit if self.rng.random() < case.near_context_end else self.rng.randint(1, max(1, limit // 3))
            sp = self.SamplingParams(temperature=0.0, max_new_tokens=max_new)
            req = _Req(self.next_rid, prompt, max_new, self.ReqKvInfo(), sp, device_len=prompt)
            self.next_rid += 1
            new.append(req)
        if not new:
            return
        rows = self.pool.alloc(new)
        assert rows is not None, "no free req_to_token row"
        for row in rows:
            if row in self.rows_seen:
                self.out.rows_reused += 1
            self.rows_seen.add(row)
        lens = torch.tensor([r.prompt_len for r in new], dtype=torch.int64)
        slots = alloc_token_slots(self.cache, int(lens.sum()))
        offset = 0
        for req in new:
            self._own(slots[offset : offset + req.prompt_len], req)
            offset += req.prompt_len
            req.kv.kv_committed_len = req.kv.kv_allocated_len = req.prompt_len
        assign_req_to_token_pool_func(
            torch.tensor(rows, dtype=torch.int64), self.pool.req_to_token,
            torch.zeros_like(lens), lens, slots, len(new),
        )  # fmt: skip
        self.out.requests += len(new)
        self.running.extend(new)

    def _own(self, slots: Any, req: _Req) -> None:
        if (self.owner[slots] != -1).any():
            raise AssertionError(f"allocator returned slots that are still owned: {slots.tolist()}")
        self.owner[slots] = req.rid

    def _release_finished(self) -> None:
        keep: list[_Req] = []
        for req in self.running:
            host_output = req.host_committed(self.case.overlap) - req.prompt_len
            if host_output >= req.max_new:
                row = req.kv.req_pool_idx
                slots = self.pool.req_to_token[row, : req.kv.kv_allocated_len].to(self.torch.int64)
                self.cache.token_to_kv_pool_allocator.free(slots)
                self.owner[slots] = -1
                self.pool.free(req)
            else:
                keep.append(req)
        self.running = keep

    def _prepare(self) -> _Batch:
        torch = self.torch
        overlap = self.case.overlap
        for req in self.running:
            req.kv.kv_committed_len = req.host_committed(overlap)
        batch = _Batch(list(self.running), self.pool, self.cache)
        before = {r.rid: r.kv.kv_allocated_len for r in batch.reqs}
        self.draft_input.prepare_for_decode(batch)
        for req in batch.reqs:
            row = req.kv.req_pool_idx
            cur, nxt = before[req.rid], req.kv.kv_allocated_len
            margin = self.row_width - nxt
            if self.out.min_row_margin is None or margin < self.out.min_row_margin:
                self.out.min_row_margin = margin
            if nxt > self.row_width:
                self.out.row_overflows += 1
                self._violation(f"request {req.rid}: allocation {nxt} > req_to_token row width {self.row_width}")
                continue
            if nxt > cur:
                self._own(self.pool.req_to_token[row, cur:nxt].to(torch.int64), req)
        return batch

    # ---- worker side -----------------------------------------------------------------
    def _window(self, batch: _Batch) -> Any:
        from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
        from sglang.srt.utils.common import next_power_of_2

        torch = self.torch
        bs = batch.batch_size()
        width = self.case.window
        start = torch.tensor([r.device_len for r in batch.reqs], dtype=torch.int64)
        out = torch.empty((bs * width,), dtype=torch.int64)
        assign_extend_cache_locs[(bs,)](
            batch.req_pool_indices, self.pool.req_to_token, start, start + width, out,
            self.pool.req_to_token.shape[1], next_power_of_2(bs),
        )  # fmt: skip
        return out.view(bs, width)

    def _check(self, batch: _Batch, window: Any) -> None:
        torch = self.torch
        width = self.case.window
        seq_lens_cpu = torch.tensor([r.device_len for r in batch.reqs], dtype=torch.int64)
        allocated = torch.tensor([r.kv.kv_allocated_len for r in batch.reqs], dtype=torch.int64)
        overrun_any = False
        for i, req in enumerate(batch.reqs):
            self.out.request_steps += 1
            over = req.device_len + width - req.kv.kv_allocated_len
            if over > 0:
                overrun_any = True
                self.out.overrun_steps += 1
                self.out.max_overrun = max(self.out.max_overrun, over)
                self._violation(
                    f"request {req.rid}: window {req.device_len}..{req.device_len + width - 1} past its "
                    f"allocation of {req.kv.kv_allocated_len} slots by {over}"
                )
            owners = self.owner[window[i]]
            foreign = int(((owners != req.rid) & (owners != -1)).sum())
            free = int((owners == -1).sum())
            self.out.foreign_slots += foreign
            self.out.free_slots += free
            if foreign:
                self._violation(f"request {req.rid}: {foreign} window slots belong to another live request")
        self._mask_size(seq_lens_cpu)
        if self.invariant is None:
            return
        try:
            self.invariant(seq_lens_cpu, allocated, width)
        except RuntimeError:
            self.out.invariant_raised += 1
            if not overrun_any:
                self.out.invariant_false_alarms += 1
        else:
            if overrun_any:
                self.out.invariant_missed += 1

    def _mask_size(self, seq_lens_cpu: Any) -> None:
        """The packed mask the worker allocates this step, sized as it sizes it: from P itself
        (non-overlap) or, under overlap, from the committed length prepare_for_decode reserved
        from plus the most one step commits (ddtree_prefix_upper_bound_cpu)."""
        from sglang.srt.speculative import ddtree_utils as U

        case = self.case
        if case.budget is None:
            return
        committed = getattr(self.draft_input, "committed_kv_lens_cpu", None)
        bound, _exact = U.ddtree_prefix_upper_bound_cpu(
            None if case.overlap else seq_lens_cpu, committed, case.max_commit
        )
        numel = U.ddtree_mask_numel_bound(bound, case.verify_width)
        self.out.max_mask_numel = max(self.out.max_mask_numel, int(numel or 0))

    def _commit(self, batch: _Batch) -> None:
        case = self.case
        for req in batch.reqs:
            a = 1
            while a < case.max_commit and self.rng.random() < case.accept_prob:
                a += 1
            req.device_len += a
            req.in_flight = a

    def _violation(self, text: str) -> None:
        if self.out.first_violation is None:
            self.out.first_violation = text

    def run(self) -> Outcome:
        for _ in range(self.case.steps):
            self._release_finished()
            self._admit()
            batch = self._prepare()
            window = self._window(batch)
            self._check(batch, window)
            self._commit(batch)
        return self.out


def simulate(
    case: Case, *, draft_input_cls: type | None = None, invariant: Callable[..., None] | None = None
) -> Outcome:
    """Run one case under a runtime context resolved from the bundle's command line.

    ``draft_input_cls`` defaults to the patched tree's ``DFlashDraftInputV2``;
    pass ``load_pristine_draft_input(wheel)`` for 0.5.23's own reservation.
    """
    from sglang.srt.runtime_context import use_context

    if draft_input_cls is None:
        from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

        draft_input_cls = DFlashDraftInputV2
    with use_context(resolved_context(case.block, case.budget)):
        return _Sim(case, draft_input_cls, invariant).run()
