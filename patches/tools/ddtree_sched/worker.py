"""The patched ``DFlashWorkerV2`` on stand-in model runners.

The worker object is SGLang's own class and every method the scheduler calls
on it (``forward_batch_generation``, its prefill and decode paths, the DDTree
tree path, ``_init_ddtree``, ``spec_v2_attn_backends``) runs unmodified. What
stands in for the GPU:

- the target and draft forwards (``lm``: token arithmetic over real KV slots);
- ``DDTreeVerifyInput.prepare_for_verify``: the real one builds a
  ``ForwardBatch`` and the attention backend's metadata on the device; the
  stand-in hands the verify forward the same fields (tokens, positions, the
  packed mask, the write slots, P) and the mask offsets the Triton backend
  computes from the device's P;
- ``_append_target_hidden_to_draft_kv_by_loc``: the draft model's KV
  projection of target hidden states; the stand-in writes the (token,
  position) the hidden state carries into the draft KV at the same slots and
  under the same commit lengths.

The attention backends are ``TritonAttnBackend`` objects (the class the
deployment renders; only its ``needs_cpu_seq_lens`` flag is read here, through
SGLang's ``decide_needs_cpu_seq_lens``). The KV index translators are SGLang's
``KVIndexTranslator`` over the real ``req_to_token``.
"""

# ruff: noqa: PLC0415 -- torch/sglang come from the CPU venv and the patched tree on sys.path

from __future__ import annotations

import types
from typing import Any

from . import lm


class _Strict:
    """An object that names the attribute a code path wanted but the replay lacks."""

    _what = "stand-in"

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"{self._what} has no {name!r} (the replay does not stand in for it)")


class _Embedding(_Strict):
    _what = "stand-in embedding"

    def __call__(self, ids: Any) -> Any:
        import torch

        return torch.nn.functional.one_hot(ids.to(torch.int64), lm.VOCAB).to(torch.float32)


class _TargetModel(_Strict):
    _what = "stand-in target model"

    def __init__(self) -> None:
        import torch

        # Hidden size = vocabulary and an identity head: the drafter's hidden
        # states are its logits, read through the worker's own top-K.
        self.lm_head = types.SimpleNamespace(weight=torch.eye(lm.VOCAB, dtype=torch.float32))
        self._embed = _Embedding()

    def get_input_embeddings(self) -> Any:
        return self._embed


class Runners:
    """The KV state both runners share, and the counters of what the forwards saw."""

    def __init__(self, req_to_token_pool: Any, allocator: Any, pool: lm.ToyPool, context_len: int) -> None:
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.pool = pool
        self.draft = lm.KVStore(pool.store.tok.shape[0])
        self.errors = lm.KVErrors()
        self.context_len = context_len
        self.verify_steps = 0
        self.on_window: Any = None  # called with (ScheduleBatch, P per request) at each verify
        self.live: Any = lambda: []  # the requests that hold a req_to_token row
        self._sequences: dict[str, list[int]] = {}

    def sequence(self, req: Any, n: int) -> list[int] | None:
        """The request's first n tokens as the target decodes them greedily; None for a
        sampled request (its tokens are drawn: KV reads are checked for positions only)."""
        if req.sampling_params.top_k != 1:
            return None
        seq = self._sequences.setdefault(req.rid, list(req.origin_input_ids))
        if len(seq) < n:
            seq.extend(lm.greedy_continuation(seq, n - len(seq)))
        return seq[:n]

    def owner_of_row(self, row: int) -> Any:
        return next((q for q in self.live() if q.kv.req_pool_idx == row), None)


def _backend() -> Any:
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    return object.__new__(TritonAttnBackend)  # its class flags only (needs_cpu_seq_lens)


def _model_runner(r: Runners, *, draft: bool) -> Any:
    from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

    runner = types.SimpleNamespace()
    runner.req_to_token_pool = r.req_to_token_pool
    runner.token_to_kv_pool_allocator = r.allocator
    runner.kv_index_translator = KVIndexTranslator(
        req_to_token=r.req_to_token_pool.req_to_token, token_to_kv_pool_allocator=r.allocator,
        token_to_kv_pool=r.pool, page_size=1, device="cpu", is_draft_worker=draft,
    )  # fmt: skip
    runner.attn_backend = _backend()
    from transformers import LlamaConfig

    hf = LlamaConfig(vocab_size=lm.VOCAB, hidden_size=lm.VOCAB, num_hidden_layers=1, num_attention_heads=4,
                     num_key_value_heads=4, intermediate_size=64, max_position_embeddings=r.context_len)  # fmt: skip
    runner.model_config = types.SimpleNamespace(
        context_len=r.context_len, vocab_size=lm.VOCAB, hf_config=hf, linear_attn_registry_result=None
    )
    runner.prefill_attention_backend_str = "triton"
    runner.decode_cuda_graph_runner = None
    runner.device = "cpu"
    runner.is_draft_worker = draft
    runner.sliding_window_size = None
    runner.is_hybrid_swa = False
    runner.attention_chunk_size = None
    runner.prefill_aware_swa = False
    return runner


def _logits_output(next_token_logits: Any, hidden: Any) -> Any:
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    return LogitsProcessorOutput(next_token_logits=next_token_logits, hidden_states=hidden)


def _one_hot_logits(tokens: list[int]) -> Any:
    import torch

    logits = torch.full((len(tokens), lm.VOCAB), -20.0, dtype=torch.float32)
    if tokens:
        logits[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.int64)] = 20.0
    return logits


class TargetWorker(_Strict):
    """Stands in for the target ``TpModelWorker``: its forwards read and write the
    target KV cache (``lm.KVStore``) through the real ``req_to_token`` rows."""

    _what = "stand-in target worker"

    def __init__(self, r: Runners) -> None:
        self.r = r
        self.model_runner = _model_runner(r, draft=False)
        self.model_runner.model = _TargetModel()
        self.device = "cpu"

    def forward_batch_generation(self, batch: Any = None, forward_batch: Any = None, **kw: Any) -> Any:
        if forward_batch is not None:
            return self._verify(forward_batch)
        return self._prefill(batch, kw.get("return_kv_loc_plan", False))

    def _prefill(self, batch: Any, return_plan: bool) -> Any:
        import torch
        from sglang.srt.managers.utils import GenerationBatchResult

        r = self.r
        rows = batch.req_pool_indices.tolist()
        tokens = batch.input_ids.tolist()
        slots = batch.out_cache_loc
        hidden, next_ids, off = [], [], 0
        for i, (row, pre, ext) in enumerate(zip(rows, batch.prefix_lens, batch.extend_lens, strict=True)):
            where = f"prefill of {batch.reqs[i].rid}"
            expected = r.sequence(batch.reqs[i], pre + ext)
            ctx = r.pool.store.read_prefix(
                r.req_to_token_pool.req_to_token[row, :pre], r.errors, "target", where, expected
            )
            ext_tokens = tokens[off : off + ext]
            if expected is not None and ext_tokens != expected[pre:]:
                r.errors.note("target_wrong_token", f"{where}: extends with tokens that are not the request's")
            pos = torch.arange(pre, pre + ext, dtype=torch.int64)
            r.pool.store.write(slots[off : off + ext], torch.tensor(ext_tokens), pos)
            hidden.append(torch.stack([torch.tensor(ext_tokens, dtype=torch.float32), pos.float()], 1))
            next_ids.append(lm.next_token(ctx + ext_tokens))
            off += ext
        plan = None
        if return_plan:
            plan = self.model_runner.kv_index_translator.plan(
                req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens,
                seq_lens_cpu=batch.seq_lens_cpu, write_virtual=slots,
            )  # fmt: skip
        return GenerationBatchResult(
            logits_output=_logits_output(_one_hot_logits(next_ids), torch.cat(hidden)),
            next_token_ids=torch.tensor(next_ids, dtype=torch.int64),
            can_run_cuda_graph=False,
            kv_loc_plan=plan,
        )

    def _verify(self, fb: Any) -> Any:
        import torch
        from sglang.srt.managers.utils import GenerationBatchResult

        r = self.r
        r.verify_steps += 1
        width = int(fb.width)
        bs = int(fb.req_pool_indices.shape[0])
        prefix = fb.seq_lens.tolist()
        # The Triton backend's mask offsets: from the device's P, not from the
        # size of the buffer the worker allocated.
        indptr = [0]
        for p in prefix:
            indptr.append(indptr[-1] + width * (p + width))
        if int(fb.custom_mask.numel()) < indptr[-1]:
            raise RuntimeError(f"tree mask of {fb.custom_mask.numel()} entries, the verify reads {indptr[-1]}")
        mask = fb.custom_mask
        ids = fb.input_ids.tolist()
        positions = fb.positions.tolist()
        rows = fb.req_pool_indices.tolist()
        keys, hidden = [], []
        if r.on_window is not None:
            r.on_window(fb.batch, list(prefix))
        for b in range(bs):
            p, where = prefix[b], f"verify of {fb.batch.reqs[b].rid} at P={prefix[b]}"
            expected = r.sequence(fb.batch.reqs[b], p)
            ctx = r.pool.store.read_prefix(
                r.req_to_token_pool.req_to_token[rows[b], :p], r.errors, "target", where, expected
            )
            block = mask[indptr[b] : indptr[b + 1]].view(width, p + width)
            for i in range(width):
                row = block[i]
                if p and not bool(row[:p].all()):
                    r.errors.note("mask_prefix_hidden", f"{where}: node {i} cannot see its whole prefix")
                path = [ids[b * width + k] for k in range(width) if bool(row[p + k])]
                if positions[b * width + i] != p + len(path) - 1:
                    r.errors.note(
                        "node_position", f"{where}: node {i} at {positions[b * width + i]}, depth {len(path) - 1}"
                    )
                keys.append(lm.context_keys(ctx + path))
                hidden.append((ids[b * width + i], positions[b * width + i]))
        r.pool.store.write(fb.out_cache_loc, torch.tensor(ids), torch.tensor(positions))
        # The toy target's logits at every node (argmax: lm.next_token of the node's context),
        # so greedy rows walk the greedy continuation and sampled rows sample from it.
        logits = lm.target_logits_torch(*torch.tensor(keys, dtype=torch.int64).T)
        return GenerationBatchResult(
            logits_output=_logits_output(logits, torch.tensor(hidden, dtype=torch.float32)),
            can_run_cuda_graph=False,
        )


class DraftRunner(_Strict):
    """Stands in for the draft ``ModelRunner``: the block forward reads the draft KV
    (what the worker wrote back), writes the block's slots, and proposes."""

    _what = "stand-in draft runner"

    def __init__(self, r: Runners, agree: float, seed: int) -> None:
        for k, v in vars(_model_runner(r, draft=True)).items():
            setattr(self, k, v)
        self.r = r
        self.agree = agree
        self.seed = seed

    def forward(self, fb: Any) -> Any:
        import torch

        r = self.r
        bs = int(fb.batch_size)
        block = int(fb.input_ids.shape[0]) // bs
        prefix = fb.seq_lens.tolist()
        rows = fb.req_pool_indices.tolist()
        ids = fb.input_ids.view(bs, block)
        out = []
        for b in range(bs):
            req = r.owner_of_row(rows[b])
            where = f"draft block of {getattr(req, 'rid', '?')} at P={prefix[b]}"
            expected = None if req is None else r.sequence(req, prefix[b])
            slots = r.req_to_token_pool.req_to_token[rows[b], : prefix[b]]
            ctx = r.draft.read_prefix(slots, r.errors, "draft", where, expected)
            root = int(ids[b, 0])
            out.append([0.0] * lm.VOCAB)
            out.extend(lm.draft_logits([*ctx, root], block, self.agree, self.seed))
        r.draft.write(fb.out_cache_loc, fb.input_ids, fb.positions)
        return types.SimpleNamespace(
            logits_output=_logits_output(None, torch.tensor(out, dtype=torch.float32)), can_run_graph=False
        )


def _prepare_for_verify(self: Any, batch: Any, target_worker: Any, *, defer_metadata_init: bool = False) -> Any:
    """Stand-in for ``DDTreeVerifyInput.prepare_for_verify``: the same edits to the
    ScheduleBatch, and the fields the verify forward reads."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    batch.input_ids = self.draft_token
    batch.spec_info = self
    batch.forward_mode = ForwardMode.TARGET_VERIFY
    fb = types.SimpleNamespace(
        input_ids=self.draft_token, positions=self.positions, custom_mask=self.custom_mask,
        width=int(self.draft_token_num), out_cache_loc=batch.out_cache_loc,
        req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens,
        seq_lens_cpu=batch.seq_lens_cpu, batch=batch, spec_info=self,
    )  # fmt: skip
    return fb, False


def _append_target_hidden(
    self: Any,
    *,
    target_hidden: Any,
    cache_loc: Any,
    positions: Any,
    cache_loc_2d: Any = None,
    commit_lens: Any = None,
    extend_lens: Any = None,
) -> None:
    """Stand-in for the draft KV write-back: the (token, position) each target
    hidden state carries goes to the draft KV at ``cache_loc``, under ``commit_lens``."""
    import torch

    r = self._ddtree_replay
    hidden_pos = target_hidden[:, 1].to(positions.dtype)
    keep = torch.ones_like(positions, dtype=torch.bool)  # every row (prefill)
    if cache_loc_2d is not None:
        width = int(cache_loc_2d.shape[1])
        keep = (torch.arange(width)[None, :] < commit_lens.to(torch.int64)[:, None]).reshape(-1)
    wrong = keep & (hidden_pos != positions)
    if bool(wrong.any()):
        i = int(wrong.nonzero()[0])
        r.errors.note(
            "writeback_mismatch",
            f"draft KV write-back: row {i} carries position {int(hidden_pos[i])}, written at {int(positions[i])}",
        )
    r.draft.write(cache_loc[keep], target_hidden[keep, 0].to(positions.dtype), positions[keep])


def build_worker(r: Runners, *, block: int, agree: float, seed: int) -> Any:
    """SGLang's ``DFlashWorkerV2`` (patched) over the stand-in runners, initialised
    through its own ``_init_ddtree`` and ``_ensure_draft_block_buffers``."""
    import torch
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    w = object.__new__(DFlashWorkerV2)
    target = TargetWorker(r)
    fields = dict(
        _target_worker=target, model_runner=target.model_runner, device="cpu", block_size=block,
        speculative_num_draft_tokens=block, draft_model_runner=DraftRunner(r, agree, seed),
        draft_model=types.SimpleNamespace(is_nemotron_35_draft=False), selector=None, lilicorr=None,
        _is_domino=False, _need_mamba_verify_commit=False, use_compact_draft_cache=False,
        _use_triton_prepare_block=False, _mask_token_id=lm.MASK_TOKEN, _full_embed_gpu=None,
        _noise_embed_scale=1.0, _target_logits_processor=None, _draft_sampler=None,
        _warned_sampling_fallback=False, _selector_sample=None, _target_tp_rank=0,
        _tp_sync=types.SimpleNamespace(sync=lambda *a, **k: None),
        draft_parallel_layout=types.SimpleNamespace(tp_group=None, disable_cp=False),
        _block_pos_offsets=torch.arange(block, dtype=torch.int64), _ddtree_replay=r,
        _draft_block_ids_buf=None, _draft_block_positions_buf=None, _draft_block_tokens_buf=None,
        _draft_verify_out_cache_loc_buf=None, _draft_block_end_buf=None, _draft_seq_lens_cpu_buf=None,
    )  # fmt: skip
    for k, v in fields.items():
        setattr(w, k, v)
    from sglang.srt.speculative import dflash_worker_v2 as mod

    w._draft_block_spec_info = mod.make_draft_block_spec_info(draft_token_num=block, device="cpu")
    w._append_target_hidden_to_draft_kv_by_loc = types.MethodType(_append_target_hidden, w)
    w._init_ddtree()
    return w


def install_verify_stand_in() -> Any:
    """Put the stand-in ``prepare_for_verify`` on ``DDTreeVerifyInput``; returns the undo."""
    from sglang.srt.speculative.dflash_info import DDTreeVerifyInput

    saved = DDTreeVerifyInput.__dict__.get("prepare_for_verify")
    DDTreeVerifyInput.prepare_for_verify = _prepare_for_verify  # type: ignore[method-assign]

    def undo() -> None:
        if saved is None:
            del DDTreeVerifyInput.prepare_for_verify
        else:
            DDTreeVerifyInput.prepare_for_verify = saved  # type: ignore[method-assign]

    return undo
