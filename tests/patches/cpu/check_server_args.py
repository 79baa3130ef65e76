"""The patched 0.5.23 server args: the bundle's DDTree command line parses,
resolves to DFLASH in tree mode with the width split, and every refused
combination raises with its message.

`handle_speculative_decoding` is run for real; only the draft-config read
(`hf_transformers_utils.get_config`, which needs transformers and a model on
disk) is replaced by a stand-in, and the published runtime spec config (set
by a running server) by the resolved args.
"""

from __future__ import annotations

import sys
import types

import pytest
import sglang.srt.runtime_context as rc
from sglang.srt.arg_groups import speculative_hook as H
from sglang.srt.arg_groups.overrides import resolving_view
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

BUNDLE_ARGV = [
    "--model-path", "/models/kimi-k2.6",
    "--device", "cuda",
    "--speculative-algorithm", "DDTREE",
    "--speculative-draft-model-path", "/models/dflash-drafter",
    "--speculative-dflash-block-size", "8",
    "--speculative-ddtree-budget", "16",
    "--speculative-ddtree-topk-cap", "4",
    "--speculative-draft-window-size", "2048",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _draft_config_stub(monkeypatch):
    fake = types.ModuleType("sglang.srt.utils.hf_transformers_utils")
    fake.get_config = lambda *a, **k: types.SimpleNamespace(architectures=["DFlashDraftModel"], block_size=8)
    monkeypatch.setitem(sys.modules, "sglang.srt.utils.hf_transformers_utils", fake)


def _argv(**replace):
    argv = list(BUNDLE_ARGV)
    for name, value in replace.items():
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            i = argv.index(flag)
            if value is None:
                del argv[i : i + 2]
            else:
                argv[i + 1] = str(value)
        elif value is not None:
            argv += [flag] if value is True else [flag, str(value)]
    return argv


def resolve(argv):
    args = prepare_server_args(argv)
    H.handle_speculative_decoding(args)
    return args, resolving_view(args)


def _widths(monkeypatch, args, cfg):
    monkeypatch.setattr(rc, "get_spec", lambda: cfg)
    algo = SpeculativeAlgorithm.from_string(cfg.speculative_algorithm)
    b = int(cfg.speculative_num_draft_tokens)
    return (
        algo.get_num_tokens_per_req_for_target_verify(b, False),
        algo.get_num_tokens_per_req_for_target_verify(b, True),
        algo.resolve_max_speculative_num_draft_tokens(args),
        algo.is_ddtree(),
    )


def test_bundle_command_line_parses_and_resolves(monkeypatch):
    args = prepare_server_args(BUNDLE_ARGV)
    assert args.speculative_algorithm == "DDTREE"
    assert (args.speculative_ddtree_budget, args.speculative_ddtree_topk_cap) == (16, 4)
    H.handle_speculative_decoding(args)
    cfg = resolving_view(args)
    assert cfg.speculative_algorithm == "DFLASH"  # server info reports DFLASH ...
    assert cfg.speculative_ddtree_budget == 16  # ... with the budget set
    assert cfg.speculative_ddtree_topk_cap == 4
    assert cfg.speculative_num_draft_tokens == 8  # the block size, for the drafter
    assert cfg.speculative_dflash_block_size == 8
    assert cfg.speculative_draft_window_size == 2048
    assert cfg.page_size == 1 and cfg.attention_backend == "triton"
    target, draft, kv, is_ddtree = _widths(monkeypatch, args, cfg)
    assert (target, draft, kv, is_ddtree) == (17, 8, 17, True)


@pytest.mark.parametrize(
    ("block", "budget", "expect"),
    [(8, 8, (9, 8, 9)), (8, 4, (5, 8, 8)), (16, 32, (33, 16, 33)), (8, 64, (65, 8, 65)), (8, 7, (8, 8, 8))],
)
def test_width_split(monkeypatch, block, budget, expect):
    args, cfg = resolve(_argv(speculative_dflash_block_size=block, speculative_ddtree_budget=budget))
    assert _widths(monkeypatch, args, cfg)[:3] == expect


def test_topk_cap_defaults_to_4(monkeypatch):
    _, cfg = resolve(_argv(speculative_ddtree_topk_cap=None))
    assert cfg.speculative_ddtree_topk_cap == 4


def test_plain_dflash_is_unchanged(monkeypatch):
    args, cfg = resolve(
        _argv(speculative_algorithm="DFLASH", speculative_ddtree_budget=None, speculative_ddtree_topk_cap=None)
    )
    assert cfg.speculative_algorithm == "DFLASH" and cfg.speculative_ddtree_budget is None
    assert _widths(monkeypatch, args, cfg) == (8, 8, 8, False)
    assert cfg.attention_backend is None  # DDTree's triton default does not leak into DFLASH


def test_dflash_with_budget_is_tree_mode(monkeypatch):
    args, cfg = resolve(_argv(speculative_algorithm="DFLASH"))
    assert _widths(monkeypatch, args, cfg) == (17, 8, 17, True)


def test_ddtree_alias_everywhere():
    assert SpeculativeAlgorithm.from_string("DDTREE") is SpeculativeAlgorithm.DFLASH
    assert SpeculativeAlgorithm.from_string("ddtree") is SpeculativeAlgorithm.DFLASH
    assert H._resolve_speculative_algorithm_alias("DDTREE", None) == "DFLASH"


REFUSED = [
    (dict(speculative_ddtree_budget=None), "DDTREE requires --speculative-ddtree-budget"),
    (dict(speculative_algorithm="EAGLE"), "select DDTree, the tree mode of DFLASH"),
    (dict(speculative_algorithm="DFLASH", speculative_ddtree_budget=None), "requires --speculative-ddtree-budget"),
    (dict(speculative_use_rejection_sampling=True), "rejection-sampling is not supported"),
    (dict(page_size=16), "needs\\s+--page-size 1"),
    (dict(attention_backend="fa3"), "validated with its packed tree mask"),
    (dict(attention_backend="flashinfer"), "validated with its packed tree mask"),
    (dict(decode_attention_backend="flashinfer"), "--decode-attention-backend flashinfer"),
    (dict(prefill_attention_backend="fa3"), "--prefill-attention-backend fa3"),
    (dict(speculative_ddtree_budget=0), "must be >= 1, got 0"),
    (dict(speculative_ddtree_budget=-3), "must be >= 1, got -3"),
    (dict(enable_strict_thinking=True), "--enable-strict-thinking constrains every request"),
    (dict(speculative_ddtree_topk_cap=0), "topk-cap must be >= 1"),
    (dict(speculative_dflash_block_size=1), "block size >= 2"),
    (dict(device="cpu"), "not supported|validated on CUDA only"),
    (dict(speculative_accept_threshold_single=0.9), r"only 1\.0 .*--speculative-accept-threshold-single 0\.9\. .*not "
                                                     r"lossless"),
    (dict(speculative_accept_threshold_acc=0.5), r"--speculative-accept-threshold-acc 0\.5"),
    (dict(speculative_accept_threshold_single=0.3, speculative_accept_threshold_acc=0.8),
     r"--speculative-accept-threshold-single 0\.3, --speculative-accept-threshold-acc 0\.8"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_refused_combinations(change, message):
    with pytest.raises(ValueError, match=message):
        resolve(_argv(**change))


def test_thresholds_at_one_are_accepted_and_plain_dflash_keeps_its_own():
    """DDTree with the thresholds given as 1.0 (the default) starts; plain DFLASH keeps sglang's
    behaviour for other values (not refused here)."""
    _, cfg = resolve(_argv(speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0))
    assert cfg.speculative_ddtree_budget == 16
    _, plain = resolve(
        _argv(speculative_algorithm="DFLASH", speculative_ddtree_budget=None, speculative_ddtree_topk_cap=None,
              speculative_accept_threshold_single=0.5, speculative_accept_threshold_acc=0.7)
    )  # fmt: skip
    assert plain.speculative_accept_threshold_single == 0.5 and plain.speculative_accept_threshold_acc == 0.7


def test_large_budget_is_left_to_the_startup_memory_check(monkeypatch):
    # no fixed cap: the verify buffers are sized against the GPU at startup (check_static_buffers.py)
    args, cfg = resolve(_argv(speculative_ddtree_budget=1000))
    assert cfg.speculative_ddtree_budget == 1000
    assert _widths(monkeypatch, args, cfg)[:3] == (1001, 8, 1001)


def test_budget_equal_block_minus_one_hides_the_split(monkeypatch):
    # budget + 1 == B makes both widths equal: tests must not rely on it.
    args, cfg = resolve(_argv(speculative_ddtree_budget=7))
    target, draft, _, _ = _widths(monkeypatch, args, cfg)
    assert target == draft == 8
