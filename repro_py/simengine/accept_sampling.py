"""Acceptance length under sampling (temperature T > 0), from the greedy one and published figures.

A verify step commits ``tau = 1 + sum_{d=1}^{D} a^d`` tokens on average: the bonus token plus
the drafts accepted at each depth ``d`` of a draft of depth ``D``, where ``a`` is an effective
per-depth acceptance. Sampling makes every depth's acceptance less likely (a drafted token is
kept only when it is the token the target draws, not its argmax), modelled as one factor per
drafter family applied at every depth::

    a_T = a_0 * DECAY[family] ** T

``a_0`` is solved from the greedy acceptance (``per_depth_acceptance``), so the model needs the
greedy figure, the draft depth and T. ``DECAY`` holds one constant per family, the minimax fit
(the smallest largest relative error) to the papers' own pairs of greedy and T = 1 figures in
``PUBLISHED`` (each with its paper, table, row and column; docs/simengine.md lists them;
``benchmarks/simengine_sampled_acceptance.py`` prints the fit and every figure beside the model).

Not modelled, and said wherever the figures appear: no paper reports acceptance at a temperature
between 0 and 1, so ``s ** T`` between them (T = 0.7) is an interpolation, not a calibration;
top_p, top_k and min_p do not change the modelled acceptance (no published figure isolates
them).
"""

from __future__ import annotations

import dataclasses

# per-depth acceptance factor at T = 1, per drafter family (minimax fit to PUBLISHED, see the module doc)
DECAY: dict[str, float] = {"dflash": 0.964, "ddtree": 0.988, "eagle3": 0.946}
FAMILIES = tuple(DECAY)

DFLASH_PAPER = "DFlash (Chen, Liang, Liu, arXiv:2602.06036v2), Table 1"
DDTREE_PAPER = "DDTree (Ringel, Romano, arXiv:2604.12989), Table 1 (tab:benchmark-results)"
EAGLE3_PAPER = "EAGLE-3 (Li, Wei, Zhang, Zhang, arXiv:2503.01840), Table 1"


@dataclasses.dataclass(frozen=True)
class PublishedTau:
    """One published pair: the mean acceptance length tau at T = 0 and at T = 1, same model and task."""

    name: str
    family: str
    depth: int  # draft depth: block size - 1 (DFlash, DDTree), the tree depth (EAGLE-3)
    greedy: float
    sampled: float
    source: str  # paper, table, row and column


# (name, family, depth, tau at T = 0, tau at T = 1, where: paper, table, row and column)
_ROWS: tuple[tuple[str, str, int, float, float, str], ...] = (
    ("DFlash(16) Qwen3-8B avg", "dflash", 15, 6.49, 5.48, f"{DFLASH_PAPER}, Q3-8B DFlash (16), Avg. tau"),
    ("DFlash(16) Qwen3-4B avg", "dflash", 15, 6.54, 5.69, f"{DFLASH_PAPER}, Q3-4B DFlash (16), Avg. tau"),
    ("DFlash Qwen3-8B MATH-500", "dflash", 15, 7.79, 6.46, f"{DDTREE_PAPER}, Qwen3-8B DFlash, MATH-500 tau"),
    ("DFlash Qwen3-8B MT-Bench", "dflash", 15, 4.28, 3.77, f"{DDTREE_PAPER}, Qwen3-8B DFlash, MT-Bench tau"),
    ("DDTree Qwen3-8B MATH-500", "ddtree", 15, 10.73, 9.54, f"{DDTREE_PAPER}, Qwen3-8B DFlash+DDTree, MATH-500 tau"),
    ("DDTree Qwen3-8B MT-Bench", "ddtree", 15, 6.58, 6.02, f"{DDTREE_PAPER}, Qwen3-8B DFlash+DDTree, MT-Bench tau"),
    ("DDTree Qwen3-4B MATH-500", "ddtree", 15, 10.71, 9.61, f"{DDTREE_PAPER}, Qwen3-4B DFlash+DDTree, MATH-500 tau"),
    ("DDTree Qwen3-Coder-30B-A3B HumanEval", "ddtree", 15, 10.72, 10.42,
     f"{DDTREE_PAPER}, Qwen3-Coder-30B-A3B-Instruct DFlash+DDTree, HumanEval tau"),
    ("EAGLE-3 LLaMA-3.1-8B mean", "eagle3", 8, 6.23, 4.92, f"{EAGLE3_PAPER}, L31 8B EAGLE-3, Mean tau"),
    ("EAGLE-3 Vicuna-13B mean", "eagle3", 8, 6.62, 5.67, f"{EAGLE3_PAPER}, V 13B EAGLE-3, Mean tau"),
    ("EAGLE-3(16) Qwen3-8B avg", "eagle3", 7, 2.96, 2.83, f"{DFLASH_PAPER}, Q3-8B EAGLE-3 (16), Avg. tau"),
    ("EAGLE-3(60) Qwen3-8B avg", "eagle3", 7, 3.40, 3.26, f"{DFLASH_PAPER}, Q3-8B EAGLE-3 (60), Avg. tau"),
)  # fmt: skip
PUBLISHED: tuple[PublishedTau, ...] = tuple(PublishedTau(*row) for row in _ROWS)


def accepted_drafts(alpha: float, depth: int) -> float:
    """Expected accepted drafts of one verify step: ``sum_{d=1}^{depth} alpha^d``."""
    return sum(alpha**d for d in range(1, depth + 1))


def per_depth_acceptance(greedy_tau: float, depth: int) -> float:
    """The ``a`` in [0, 1] with ``1 + sum_{d<=depth} a^d == greedy_tau`` (1 when tau is at its maximum)."""
    target = greedy_tau - 1.0
    if depth < 1 or target <= 0.0:
        return 0.0
    if target >= depth:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: the sum grows with a
        mid = (lo + hi) / 2.0
        if accepted_drafts(mid, depth) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def sampled_accept_length(greedy_tau: float, depth: int, family: str, temperature: float) -> float:
    """The acceptance length at ``temperature`` of a drafter whose greedy acceptance is ``greedy_tau``."""
    if family not in DECAY:
        raise ValueError(f"family {family!r}: allowed: {', '.join(FAMILIES)}")
    if temperature <= 0.0 or depth < 1:
        return greedy_tau
    alpha = per_depth_acceptance(greedy_tau, depth) * DECAY[family] ** temperature
    return 1.0 + accepted_drafts(alpha, depth)


def modelled(fig: PublishedTau) -> float:
    """The model's T = 1 acceptance for a published figure's greedy one."""
    return sampled_accept_length(fig.greedy, fig.depth, fig.family, 1.0)


def minimax_decay(family: str, step: float = 0.001) -> tuple[float, float]:
    """``(decay, largest relative error)``: the family's constant that minimises the largest relative error over
    its published figures (what ``DECAY`` holds, rounded to ``step``)."""
    figures = [f for f in PUBLISHED if f.family == family]
    best = (1.0, float("inf"))
    for i in range(int(0.5 / step), int(1.0 / step) + 1):
        decay = i * step
        worst = max(
            abs(1.0 + accepted_drafts(per_depth_acceptance(f.greedy, f.depth) * decay, f.depth) - f.sampled) / f.sampled
            for f in figures
        )
        if worst < best[1]:
            best = (round(decay, 6), worst)
    return best
