"""What DDTree cannot serve is refused cleanly.

Per request (HTTP 400, the server keeps serving): the patched tokenizer
manager's real ``_create_tokenized_object`` raises ValueError (what /generate
and the OpenAI routes turn into a 400) for grammar constraints /
response_format, a thinking budget, custom logit processors, path-dependent
penalties and watermarking, when DDTree is on; the same requests pass with
plain DFLASH. Sampling (temperature > 0, top-k / top-p / min-p, logit_bias,
a seed) is served, not refused. At startup: ``_init_ddtree`` (the
real worker method, on a stand-in worker) refuses sliding-window, hybrid-SWA,
chunked-attention and mamba targets and unsupported LM heads.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))

import kv_window_sim as S  # noqa: E402
import torch  # noqa: E402
from ddtree_sched import replay as RP  # noqa: E402
from ddtree_sched import scheduler as SCH  # noqa: E402
from sglang.srt.managers.io_struct import GenerateReqInput  # noqa: E402
from sglang.srt.managers.schedule_batch import FINISH_ABORT  # noqa: E402
from sglang.srt.managers.tokenizer_manager import TokenizerManager  # noqa: E402
from sglang.srt.mem_cache.allocation_sizing import get_req_to_token_extra_context_len  # noqa: E402
from sglang.srt.runtime_context import use_context  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402
from sglang.srt.speculative import ddtree_utils as U  # noqa: E402
from sglang.srt.speculative import dflash_worker_v2 as W  # noqa: E402

REFUSED = [
    ({"temperature": 0, "json_schema": '{"type": "object"}'}, {}, r"grammar-constrained requests \(json_schema;"),
    ({"temperature": 0, "regex": "[a-z]+"}, {}, r"\(regex;"),
    ({"temperature": 0, "ebnf": 'root ::= "a"'}, {}, r"\(ebnf;"),
    ({"temperature": 0, "structural_tag": '{"structures": []}'}, {}, r"\(structural_tag;"),
    ({"temperature": 0, "custom_params": {"thinking_budget": 64}}, {}, "thinking budget"),
    ({"temperature": 0}, {"custom_logit_processor": "serialized-processor"}, "custom logit processor"),
    ({"temperature": 0, "frequency_penalty": 0.5}, {}, r"frequency_penalty=0\.5: they depend on the tokens"),
    ({"temperature": 0, "presence_penalty": -0.2}, {}, r"presence_penalty=-0\.2"),
    ({"temperature": 0, "repetition_penalty": 1.1}, {}, r"repetition_penalty=1\.1"),
    ({"temperature": 0, "min_new_tokens": 4}, {}, "min_new_tokens=4"),
    ({"temperature": 0.7, "json_schema": '{"type": "object"}'}, {}, r"grammar-constrained requests \(json_schema;"),
    ({"temperature": 1.0, "frequency_penalty": 0.5}, {}, r"frequency_penalty=0\.5"),
]
ALLOWED = [
    {"temperature": 0, "max_new_tokens": 16},
    {"temperature": 0.8, "top_k": 1},  # top_k 1 is greedy
    {"temperature": 0.7},  # sampled: target-only tree sampling
    {"temperature": 1.0, "top_p": 0.9},
    {"temperature": 0.6, "top_k": 50, "top_p": 0.95, "min_p": 0.05},
    {"temperature": 1.0, "logit_bias": {"5": 2.0}, "sampling_seed": 7, "n": 1},
    {},  # the OpenAI client's default request: temperature 1.0
    {"temperature": 0, "logit_bias": {"5": 2.0}},  # static: applied to every tree node alike
    {"temperature": 0, "stop": ["\n\n"], "n": 1},
    {"temperature": 0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0},
]


# stop strings and min_new_tokens need a tokenizer at normalize(); only encode() is used
TOKENIZER = types.SimpleNamespace(encode=lambda text, add_special_tokens=False: [ord(c) % 1000 for c in text])


def _params(raw):
    sp = SamplingParams(**raw)
    sp.normalize(TOKENIZER)
    sp.verify(1000)
    return sp


@pytest.mark.parametrize(("raw", "extra", "message"), REFUSED, ids=[m[:32] for _, _, m in REFUSED])
def test_request_refusal_names_the_value(raw, extra, message):
    reason = U.ddtree_request_refusal(_params(raw), **extra)
    assert reason is not None and "--speculative-ddtree-budget" in reason
    assert re.search(message, reason), reason


@pytest.mark.parametrize("raw", ALLOWED, ids=lambda r: ",".join(sorted(r)))
def test_request_allowed(raw):
    assert U.ddtree_request_refusal(_params(raw)) is None


class _ModelConfig:
    vocab_size = 1000


def _manager():
    """The attributes _create_tokenized_object reads, around the real method."""
    tm = TokenizerManager.__new__(TokenizerManager)
    tm.preferred_sampling_params = None
    tm.sampling_params_class = SamplingParams
    tm.tokenizer = TOKENIZER
    tm.model_config = _ModelConfig()
    tm.fake_bootstrap_room_counter = 0
    tm.tokenized_generate_req_type = types.SimpleNamespace
    tm.rid_to_state = _States()
    return tm


class _States(dict):
    """rid -> request state; only its time_stats are touched."""

    def __missing__(self, rid):
        stats = types.SimpleNamespace(set_tokenize_finish_time=lambda: None)
        return types.SimpleNamespace(time_stats=stats)


def _tokenize(tm, raw, extra):
    obj = GenerateReqInput(text="hello", sampling_params=dict(raw), **extra)
    obj.normalize_batch_and_arguments()
    return tm._create_tokenized_object(obj, "hello", [1, 2, 3])


@pytest.mark.parametrize(("raw", "extra", "message"), REFUSED, ids=[m[:32] for _, _, m in REFUSED])
def test_tokenizer_refuses_with_a_400_error_when_ddtree_is_on(raw, extra, message):
    tm = _manager()
    with use_context(S.resolved_context(8, 16)), pytest.raises(ValueError, match=message):
        _tokenize(tm, raw, extra)


def test_tokenizer_passes_greedy_and_sampled_requests_with_ddtree_and_everything_without_it():
    tm = _manager()
    with use_context(S.resolved_context(8, 16)):
        for raw in ALLOWED:
            out = _tokenize(tm, raw, {})  # not refused
            greedy = raw.get("temperature", 1.0) == 0 or raw.get("top_k") == 1
            assert out.input_ids is not None and (out.sampling_params.top_k == 1) == greedy, raw
    with use_context(S.resolved_context(8, None)):  # plain DFLASH: nothing refused here
        for raw, extra, _ in REFUSED:
            out = _tokenize(tm, raw, extra)
            assert out.input_ids is not None


# ---- startup: the target model -------------------------------------------------------------
def _worker(monkeypatch, *, mamba=False, **runner):
    lm_head = runner.pop("lm_head", types.SimpleNamespace(weight=torch.zeros((4, 4), dtype=torch.bfloat16)))
    target = types.SimpleNamespace(
        sliding_window_size=runner.pop("sliding_window_size", None),
        is_hybrid_swa=runner.pop("is_hybrid_swa", False),
        attention_chunk_size=runner.pop("attention_chunk_size", None),
        model_config=types.SimpleNamespace(),
        model=types.SimpleNamespace(lm_head=lm_head),
        max_running_requests=8,
    )
    monkeypatch.setattr(W, "mambaish_config", lambda cfg: object() if mamba else None)
    return types.SimpleNamespace(
        block_size=8, selector=None, lilicorr=None, _is_domino=False, _target_tp_rank=1,
        model_runner=target, device="cpu",
    )  # fmt: skip


def _init(worker, budget=16):
    with use_context(S.resolved_context(8, budget)):
        W.DFlashWorkerV2._init_ddtree(worker)


TARGETS = [
    ({"sliding_window_size": 4096}, r"sliding-window / chunked-attention targets \(sliding_window_size=4096"),
    ({"is_hybrid_swa": True}, r"hybrid SWA=True"),
    ({"attention_chunk_size": 8192}, r"attention_chunk_size=8192"),
    ({"mamba": True}, "mamba / hybrid linear-attention"),
    ({"lm_head": types.SimpleNamespace(weight=torch.zeros((4, 4), dtype=torch.int8))}, "dense target lm_head"),
    ({"lm_head": types.SimpleNamespace(weight=None)}, "dense target lm_head"),
    (
        {"lm_head": types.SimpleNamespace(weight=torch.zeros((4, 4), dtype=torch.bfloat16),
                                          shard_indices=types.SimpleNamespace(num_added_elements=3))},
        r"added vocabulary \(3 added",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("runner", "message"), TARGETS, ids=[m[:24] for _, m in TARGETS])
def test_startup_refuses_the_target(monkeypatch, runner, message):
    worker = _worker(monkeypatch, **runner)
    with pytest.raises(ValueError, match=message):
        _init(worker)


def test_startup_accepts_a_dense_full_attention_target(monkeypatch):
    worker = _worker(monkeypatch)
    _init(worker)
    assert worker.ddtree_budget == 16 and worker.ddtree_width == 17


def test_plain_dflash_worker_skips_ddtree(monkeypatch):
    worker = _worker(monkeypatch, sliding_window_size=4096)
    _init(worker, budget=None)  # plain DFLASH: the DDTree refusals do not apply
    assert worker.ddtree_budget is None


def test_worker_stops_a_bypassed_grammar_batch_and_serves_sampling():
    src = Path(W.__file__).read_text()
    assert "the tokenizer and the scheduler refuse per request" in src
    assert "decoded as temperature 0 in tree mode" not in src  # no silent greedy fallback
    assert "ddtree_sample_verify(" in src  # sampled batches take target-only tree sampling


def test_only_the_greedy_only_refusal_is_gone():
    """Sampling is served; the per-request refusals that remain keep their text."""
    src = Path(U.__file__).read_text()
    assert "serves greedy decoding only" not in src
    for raw, extra, message in REFUSED:
        assert re.search(message, U.ddtree_request_refusal(_params(raw), **extra) or ""), raw


# ---- another ingress: straight into the scheduler ------------------------------------------
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "sync"])
def test_scheduler_aborts_each_refused_request_and_keeps_serving(overlap):
    """A request the tokenizer refuses, sent to SGLang's Scheduler as the
    TokenizedGenerateReqInput any ingress hands it (SGLANG_RUST_SERVER decodes
    straight into the scheduler): aborted alone (FINISH_ABORT, 400, the
    tokenizer's message) while the greedy requests around it are served."""
    refused = [
        ({"temperature": 0.7, "repetition_penalty": 1.1}, {}),
        ({"temperature": 0, "json_schema": '{"type": "object"}'}, {}),
        ({"temperature": 0, "frequency_penalty": 0.5}, {}),
        ({"temperature": 0}, {"custom_logit_processor": "serialized-processor"}),
        ({"temperature": 0, "custom_params": {"thinking_budget": 64}}, {}),
    ]
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    reqs = [(0, SCH.request("greedy-before", prompt, 24))]
    for i, (raw, extra) in enumerate(refused):
        reqs.append((1 + i, SCH.request(f"refused-{i}", prompt, 24, **raw, **extra)))
    reqs.append((3, SCH.request("greedy-after", prompt[::-1], 24)))
    reqs.append((2, SCH.request("sampled", prompt, 24, temperature=1.0, top_p=0.9)))
    # what the tokenizer manager would answer for each (before the scheduler sees them)
    expected = {
        recv.rid: U.ddtree_request_refusal(recv.sampling_params, custom_logit_processor=recv.custom_logit_processor)
        for _, recv in reqs
    }
    out = RP.run(RP.Case(requests=len(reqs), retract_every=0, overlap=overlap), requests=reqs)
    by_rid = {r.rid: r for r in out.reqs}
    for i in range(len(refused)):
        req = by_rid[f"refused-{i}"]
        assert expected[req.rid] is not None
        assert isinstance(req.finished_reason, FINISH_ABORT), (req.rid, req.finished_reason)
        assert req.finished_reason.message == expected[req.rid], req.finished_reason.message
        assert int(req.finished_reason.status_code) == 400
    for rid in ("greedy-before", "greedy-after", "sampled"):
        req = by_rid[rid]
        assert req.finished() and not isinstance(req.finished_reason, FINISH_ABORT)
        assert len(req.output_ids) >= 24
    # the client side: each refusal went out with its message
    sent = [(rid, reason) for p in out.sent for rid, reason in zip(p.rids, p.finished_reasons, strict=True) if reason]
    aborted = {rid: reason for rid, reason in sent if reason.get("type") == "abort"}
    assert set(aborted) == {f"refused-{i}" for i in range(len(refused))}
    for rid, reason in aborted.items():
        assert reason["status_code"] == 400 and reason["message"] == expected[rid]


def test_startup_refuses_a_budget_whose_eager_mask_does_not_fit(monkeypatch):
    """On a GPU, _init_ddtree sizes one eager step's packed mask (max running requests x D x (P_max + D)),
    P_max from the req_to_token row (context + SGLang's headroom), not from the context length."""
    worker = _worker(monkeypatch)
    worker.model_runner.model_config = types.SimpleNamespace(context_len=262144)
    monkeypatch.setattr(W, "is_cuda", lambda: True)
    with use_context(S.resolved_context(8, 16)):
        row = 262144 + get_req_to_token_extra_context_len()
    prefix = U.ddtree_mask_prefix_capacity(row, 8, 16)
    assert prefix > 262144  # a request at the context end rides past it
    need = U.ddtree_static_buffers(cuda_graph=False, max_bs=8, width=17, context_len=262144,
                                   mask_prefix_len=prefix).total  # fmt: skip
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(2 * need) - 2, 1 << 40))
    with pytest.raises(ValueError, match=r"budget 16 does not fit: eager verify buffers for D=17, max running "
                                         r"requests 8, context 262144"):  # fmt: skip
        _init(worker)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(2 * need), 1 << 40))
    _init(worker)
    assert worker.ddtree_width == 17
