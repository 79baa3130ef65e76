"""Config-echo gate: the server must report the settings the config asked for.

``/server_info`` is compared with a ``SpecConfig``: the algorithm family
(no speculative algorithm for ``none``; the DFLASH family otherwise, in tree
mode iff ``speculative_ddtree_budget`` is non-null, which is how the
``DDTREE`` alias resolves), the budget, the top-K cap, the block size and the
draft window. Any mismatch makes the config's results invalid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from repro_py.bench.server_info import ServerInfo
from repro_py.spec_config import SpecConfig

DFLASH_FAMILY = frozenset({"DFLASH", "DDTREE"})


@dataclasses.dataclass(frozen=True)
class Mismatch:
    field: str
    expected: object
    got: object

    def __str__(self) -> str:
        return f"{self.field}: expected {self.expected!r}, server reports {self.got!r}"


def check_echo(info: ServerInfo, expected: SpecConfig) -> list[Mismatch]:
    """Every setting the server reports differently from ``expected``; empty when they agree."""
    out: list[Mismatch] = []
    algo = info.speculative_algorithm
    algo_norm = algo.upper() if algo else None
    if expected.algorithm == "none":
        if algo_norm is not None:
            out.append(Mismatch("speculative_algorithm", None, algo))
        return out
    if algo_norm not in DFLASH_FAMILY:
        out.append(Mismatch("speculative_algorithm", "DFLASH", algo))
    tree = info.ddtree_budget is not None
    if expected.algorithm == "ddtree":
        if not tree:
            out.append(Mismatch("speculative_ddtree_budget", expected.budget, None))
        elif info.ddtree_budget != expected.budget:
            out.append(Mismatch("speculative_ddtree_budget", expected.budget, info.ddtree_budget))
        if info.ddtree_topk_cap != expected.topk:
            out.append(Mismatch("speculative_ddtree_topk_cap", expected.topk, info.ddtree_topk_cap))
    elif tree:
        out.append(Mismatch("speculative_ddtree_budget", None, info.ddtree_budget))
    if info.block_size != expected.block_size:
        out.append(Mismatch("speculative_dflash_block_size", expected.block_size, info.block_size))
    if info.window != expected.window:
        out.append(Mismatch("speculative_draft_window_size", expected.window, info.window))
    return out


def echo_result(info: ServerInfo, expected: SpecConfig) -> dict[str, Any]:
    mismatches = check_echo(info, expected)
    return {
        "passed": not mismatches,
        "expected": expected.as_short(),
        "reported": {
            "speculative_algorithm": info.speculative_algorithm,
            "speculative_ddtree_budget": info.ddtree_budget,
            "speculative_ddtree_topk_cap": info.ddtree_topk_cap,
            "speculative_dflash_block_size": info.block_size,
            "speculative_draft_window_size": info.window,
            "speculative_num_draft_tokens": info.num_draft_tokens,
        },
        "mismatches": [dataclasses.asdict(m) for m in mismatches],
        "reason": "; ".join(map(str, mismatches)) or None,
    }
