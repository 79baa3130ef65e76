"""The runtime context the replay runs under: the bundle's DDTree command line
parsed and resolved by the patched sglang, as one scheduler process of TP 1."""

# ruff: noqa: PLC0415 -- sglang comes from the patched tree on sys.path

from __future__ import annotations

from typing import Any


def scheduler_context(case: Any) -> tuple[Any, Any]:
    """(server args, runtime context) for ``case.argv()``. Only the drafter's
    config.json read is stood in for (it needs a model on disk)."""
    import sys

    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.runtime_context import create_context
    from sglang.srt.server_args import prepare_server_args

    tools = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import kv_window_sim

    with kv_window_sim.draft_config_stub(case.block):
        args = prepare_server_args(case.argv())
        speculative_hook.handle_speculative_decoding(args)
    # The rest of resolution loads the model config from disk; what the
    # scheduler reads (schedule, spec, memory leaves) is resolved above.
    args._resolution_finished = True
    return args, create_context(args, role="scheduler")


def single_rank() -> None:
    """Stamp the ranks of a TP 1, PP 1 scheduler (what the spawn would publish)."""
    from sglang.srt.runtime_context import derive_spawn_ranks, get_parallel

    ranks = derive_spawn_ranks(
        world_rank=0, tp_size=1, ep_join_rank_offset=0, attn_cp_size=1, attn_tp_size=1, moe_dp_size=1, moe_ep_size=1
    )
    ranks.update(attn_tp_rank=0, attn_dp_rank=0, dp_rank=None)
    get_parallel().override_permanently(**ranks)
