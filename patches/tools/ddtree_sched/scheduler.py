"""SGLang's own ``Scheduler``, built without a GPU, driving the patched worker.

The object is ``sglang.srt.managers.scheduler.Scheduler``; its state comes from
its own code wherever that code needs no device: the argument block at the
top of ``__init__`` and the model-worker dispatch of ``init_model_worker``
(run from their source, over the bundle's resolved command line),
``init_running_status``, ``init_chunked_prefill``, ``init_schedule_policy``,
``init_overlap`` (the ``FutureMap`` and ``decide_needs_cpu_seq_lens`` over the
worker's attention backends), ``init_output_streamer`` and
``init_batch_result_processor``. The replay then calls the methods the event
loops call, in their order: ``handle_generate_request`` (requests arrive as
``TokenizedGenerateReqInput``, the message every ingress sends the scheduler),
``get_next_batch_to_run`` (merging, chunked prefill through ``PrefillAdder``,
``update_running_batch`` with retraction and ``prepare_for_decode``),
``run_batch`` (``resolve_seq_lens_cpu``, ``resolve_forward_inputs``, the
worker, ``FutureMap.publish`` / ``stash``) and ``process_batch_result``
(commits, finishes, ``release_kv_cache`` into the radix cache).

What is not SGLang's here: the worker's model forwards (``worker``), the
observability parts (metrics, tracing, load reports, the step counters and the
profiler: ``Quiet``), a pass-through for DP attention and n-gram embeddings
(both off in the bundle), and no grammar backend (DDTree refuses grammars).
"""

# ruff: noqa: PLC0415 -- torch/sglang come from the CPU venv and the patched tree on sys.path

from __future__ import annotations

import inspect
import sys
import textwrap
import types
from typing import Any

from . import lm
from . import worker as W


class _Noop:
    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *a: Any, **k: Any) -> None:
        return None

    def __bool__(self) -> bool:
        return False


class Quiet:
    """An observability component with nothing to report to: every method is a no-op,
    every flag is false."""

    def __init__(self, name: str, **values: Any) -> None:
        self.__dict__["_name"] = name
        self.__dict__.update(values)

    def __getattr__(self, k: str) -> Any:
        if k.startswith("__"):
            raise AttributeError(k)
        return _Noop(f"{self._name}.{k}")

    def __bool__(self) -> bool:
        return False


class Recorder:
    """The detokenizer end of the scheduler's output socket: keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_output(self, payload: Any) -> None:
        self.sent.append(payload)


def _run_segment(s: Any, fn: Any, first: str, last: str, **names: Any) -> None:
    """Run the lines of ``fn`` from the one reading ``first`` up to the one reading
    ``last`` (exclusive) with ``self`` = ``s``: SGLang's own initialisation code."""
    src = inspect.getsource(fn).splitlines()
    a = next(i for i, line in enumerate(src) if line.strip() == first)
    b = next(i for i, line in enumerate(src) if line.strip() == last)
    code = textwrap.dedent("\n".join(src[a:b]))
    scope = dict(sys.modules[fn.__module__].__dict__)
    exec(compile(code, f"<{fn.__qualname__}: {first}>", "exec"), scope, {"self": s, **names})


def build_scheduler(server_args: Any, r: W.Runners, worker: Any, *, tree_cache: Any, pool_rows: int) -> Any:
    import torch
    from sglang.srt.configs.model_config import ModelImpl
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.managers.scheduler import Scheduler

    s = object.__new__(Scheduler)
    _run_segment(
        s, Scheduler.__init__, "# Parse args", "# Init model configs",
        server_args=server_args, port_args=types.SimpleNamespace(nccl_port=0),
    )  # fmt: skip
    model_config = worker.model_runner.model_config
    model_config.__dict__.update(
        is_encoder_decoder=False, hf_eos_token_id=None, is_multimodal=False, self_opened_think_start_ids=None,
        think_end_ids=None, _resolved_model_impl=ModelImpl.SGLANG,
    )  # fmt: skip
    kv_size = r.allocator.size

    def worker_info() -> tuple:
        from sglang.srt.runtime_context import get_schedule

        # What TpModelWorker.get_worker_info computes from the pool sizes.
        max_req_len = min(r.context_len - 1, kv_size - 1)
        return (
            kv_size, get_schedule().max_prefill_tokens, get_schedule().max_running_requests or pool_rows,
            get_schedule().max_queued_requests, max_req_len, max_req_len - 5, 0, "cpu", s.forward_stream,
            None, None, None,
        )  # fmt: skip

    target = worker.target_worker
    target.get_worker_info = worker_info
    target.get_pad_input_ids_func = lambda: None
    observers = ("metrics_collector", "profiler_manager", "kv_events_publisher", "scheduler_stage_metrics",
                 "load_inquirer", "load_publisher")  # fmt: skip
    quiet = {name: Quiet(name) for name in observers}
    fields = dict(
        device="cpu", model_config=model_config, is_generation=True, req_to_token_pool=r.req_to_token_pool,
        token_to_kv_pool_allocator=r.allocator, tree_cache=tree_cache, draft_worker=worker, tp_worker=target,
        forward_stream=torch.cpu.Stream(), schedule_stream=torch.cpu.current_stream(),
        metrics_reporter=Quiet("metrics_reporter", enable_metrics=False, num_generated_tokens=0,
                               forward_ct_decode=0, num_retracted_reqs=0),
        disaggregation_mode=_disaggregation_null(), dllm_config=None, is_hybrid_swa=False, require_mlp_sync=False,
        truncation_align_size=None, enable_fpm=False, decode_offload_manager=None, hisparse_coordinator=None,
        scripted_scheduler_hook=None, _sched_idled=False, processed_tokens_counter=0, _prev_step=None,
        _prev_prefill_end_ts=None, sliding_window_size=None, _war_barrier_enabled=False, rust_server=None,
        server_args=server_args, abort_request=lambda *a, **k: None, tokenizer=None,
        pp_group=types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1),
        dp_attn_adapter=types.SimpleNamespace(
            maybe_prepare_mlp_sync_batch=lambda b, need_sync=None: b, maybe_convert_decode_to_extend=lambda b: b
        ),
        ngram_embedding_manager=types.SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b),
        grammar_manager=types.SimpleNamespace(
            has_waiting_grammars=lambda: False, process_req_with_grammar=lambda req: False
        ),
        ipc_channels=types.SimpleNamespace(send_to_detokenizer=Recorder()),
        **quiet,
    )  # fmt: skip
    for k, v in fields.items():
        setattr(s, k, v)
    _run_segment(
        s, Scheduler.init_model_worker, "# Dispatch the model worker", "self.tp_group = get_parallel().tp_group"
    )
    s.init_running_status()
    s.init_chunked_prefill()
    s.maybe_init_dynamic_chunk_sizer()
    s.init_schedule_policy()
    s.init_overlap()
    s.init_output_streamer()
    s.init_batch_result_processor()
    # SGLang's own memory checks: the pool accounting and, with
    # SGLANG_CHECK_KV_PAGE_INVARIANTS, committed <= allocated for every row, no
    # page both owned and free, no page freed twice (loop_once runs them after
    # every iteration, as the event loops do with SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY).
    s.is_hybrid_ssm, s.full_tokens_per_layer, s.swa_tokens_per_layer = False, None, None
    s.init_pool_stats_observer()
    s.init_invariant_checker()
    # Observability only: step timing counters and router load snapshots.
    s._record_step_counters = lambda batch, result: None
    s.publish_load_snapshot = lambda force=False: None
    s.made_reqs = []

    def create(recv_req: Any, *args: Any, **kwargs: Any) -> Any:
        req = Req(*args, **kwargs)
        s.made_reqs.append(req)
        return req

    s._create_generation_req = create
    return s


def _disaggregation_null() -> Any:
    from sglang.srt.disaggregation.utils import DisaggregationMode

    return DisaggregationMode.NULL


def loop_once(s: Any, counters: dict[str, int]) -> tuple[Any, Any]:
    """One iteration of ``event_loop_overlap`` (overlap on) or ``event_loop_normal``."""
    plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
    s.running_batch = plan.running_batch
    batch = plan.batch_to_run
    counters["iterations"] = counters.get("iterations", 0) + 1
    result = None
    if not s.enable_overlap:
        if batch:
            result = s.run_batch(batch)
            s.process_batch_result(batch, result)
        s.last_batch = batch
        s.invariant_checker.self_check_during_busy()
        return batch, result
    disable = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
    if disable and s.result_queue:
        s.process_batch_result(*s.result_queue.popleft())
    if batch:
        result = s.run_batch(batch)
        s._apply_war_barrier()
        s.result_queue.append((batch.copy(), result))
    if s.last_batch and not disable and s.result_queue:
        s.process_batch_result(*s.result_queue.popleft())
    s.last_batch = batch
    s.invariant_checker.self_check_during_busy()
    return batch, result


def request(rid: str, prompt: list[int], max_new: int, **sampling: Any) -> Any:
    """A ``TokenizedGenerateReqInput`` as an ingress hands it to the scheduler."""
    from array import array

    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = {"temperature": 0.0, "max_new_tokens": max_new, "ignore_eos": True, **sampling}
    custom = params.pop("custom_logit_processor", None)
    sp = SamplingParams(**params)
    sp.normalize(None)
    sp.verify(lm.VOCAB)
    return TokenizedGenerateReqInput(
        rid=rid, input_text="", input_ids=array("q", prompt), input_embeds=None, mm_inputs=None,
        token_type_ids=None, sampling_params=sp, return_logprob=False, logprob_start_len=-1,
        top_logprobs_num=0, token_ids_logprob=None, stream=False, custom_logit_processor=custom,
    )  # fmt: skip
