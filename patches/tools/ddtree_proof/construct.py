"""Hand-built weights for the proof's target and drafter: a drafter that agrees with the
target often enough that accepts of depth >= 2 happen on most verify steps.

A random drafter proposes the target's choice about 1% of the time, so a proof
with one sees almost no deep accepts: multi-node KV moves, the draft-KV
write-back of accepted paths and the worst-case overlap lag stay barely
exercised. Here both models are built from the same token embedding table E:

Target (``LlamaForCausalLM``, what sglang loads): over a working vocabulary S
(48 tokens) the next token is pi(current token) for a fixed permutation pi
of S, except where the token before it tips the choice: layer 0 has one
previous-token head (rotary phases put its attention peak at relative
offset 1, keys are the same for every token) whose value is added to the
residual with weight ``PREV_WEIGHT``. So the greedy choice depends on the KV
of the position before (the one the last verify step wrote or moved): a
wrong slot there changes outputs. The LM head row of pi(s) is E[s]; other
layers, heads and MLPs are zero.

Drafter (``DFlashDraftModel``, one layer, the target's hidden size, 4 heads
of 64 with 4 KV heads): head h (h = 0..3) attends from the mask token at
block position d to the root only when d = h + 1 (rotary peak at offset
h + 1 minus a constant; context features are projected to zero, so context
keys score 0 and take the attention whenever the root is not at that
offset), and maps the root's embedding to E[pi^h(root)]: through the
target's LM head the drafter's first choice at depth d = 1..4 is
pi^d(root), the target's continuation while nothing tips it. Beyond depth 4
the drafter has no opinion (a flat distribution over S).

Everything is exact linear algebra on E (values: the pseudo-inverse of S's
embeddings), checked by ``draft_sim`` (a CPU re-implementation of the draft
forward of sglang's models/dflash.py) and by the proof's own accept-by-depth
counts on the GPU.
"""

# ruff: noqa: PLC0415 -- torch is imported where used: it comes from the CPU venv or the GPU venv at run time

from __future__ import annotations

import dataclasses
from typing import Any

HIDDEN = 256
HEADS = 4
HEAD_DIM = 64
ROPE_THETA = 10000.0
S_SIZE = 48  # working vocabulary
DRAFT_DEPTHS = 4  # depths the drafter predicts (one head each)
PREV_WEIGHT = 3.5  # the previous token tips ~10% of the target's choices along its chain, ~16% of random pairs
E0 = 0  # the dimension every embedding shares (content-independent queries and keys)
G_DIMS = range(1, 192)  # token identity lives here
MASK_DIMS = range(192, 256)  # the mask token's own part (outside the identity space)
EMBED_C = 4.0  # size of the shared component


@dataclasses.dataclass
class Construction:
    s_tokens: list[int]  # the working vocabulary (token ids)
    pi: dict[int, int]  # the target's base chain
    embed: Any  # [V, H]
    lm_head: Any  # [V, H]
    target_layer0: dict[str, Any]  # q/k/v/o for the previous-token head
    drafter: dict[str, Any]  # name -> tensor in DFlashDraftModel's layout


def rope_inv_freq(head_dim: int = HEAD_DIM, theta: float = ROPE_THETA) -> Any:
    import torch

    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))


def _peak_vector(offset: int, pairs: list[int], weights: list[float], const_pair: int | None, const: float) -> tuple:
    """(q, k) head vectors (neox rotary layout: pair i = dims i and i + half) whose rotary
    dot product is sum_i w_i cos(theta_i * (delta - offset)) - const, delta = query - key position."""
    import torch

    half = HEAD_DIM // 2
    theta = rope_inv_freq()
    q = torch.zeros(HEAD_DIM, dtype=torch.float64)
    k = torch.zeros(HEAD_DIM, dtype=torch.float64)
    for i, w in zip(pairs, weights, strict=True):
        amp = w**0.5
        q[i], q[i + half] = amp, 0.0
        # k rotated by -theta * offset: the dot product peaks where delta == offset
        phase = float(theta[i]) * offset
        k[i], k[i + half] = amp * torch.cos(torch.tensor(phase)), amp * torch.sin(torch.tensor(phase))
    if const_pair is not None:
        amp = abs(const) ** 0.5
        q[const_pair] = amp
        k[const_pair] = -amp if const > 0 else amp
    return q, k


def rotary_score(q: Any, k: Any, delta: int) -> float:
    """q . k after neox rotary embedding at positions (delta, 0): what attention scores."""
    import torch

    half = HEAD_DIM // 2
    ang = rope_inv_freq() * delta
    cos, sin = torch.cos(ang), torch.sin(ang)
    qr = torch.cat([q[:half] * cos - q[half:] * sin, q[half:] * cos + q[:half] * sin])
    return float((qr * k).sum())


def _embeddings(vocab: int, s_tokens: list[int], mask_id: int, gen: Any) -> Any:
    import torch

    e = torch.zeros((vocab, HIDDEN), dtype=torch.float64)
    e[:, E0] = EMBED_C
    g = torch.randn((vocab, len(G_DIMS)), generator=gen, dtype=torch.float64)
    e[:, G_DIMS.start : G_DIMS.stop] = g
    e[mask_id, G_DIMS.start : G_DIMS.stop] = 0.0
    e[mask_id, MASK_DIMS.start : MASK_DIMS.stop] = torch.randn(len(MASK_DIMS), generator=gen, dtype=torch.float64)
    return e


def _rms_normed(x: Any) -> Any:
    return x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()


def build(vocab: int, mask_id: int, specials: list[int], *, seed: int = 5) -> Construction:
    import torch

    gen = torch.Generator().manual_seed(seed)
    candidates = [t for t in range(vocab) if t not in specials and t != mask_id]
    order = torch.randperm(len(candidates), generator=gen).tolist()
    s_tokens = sorted(candidates[i] for i in order[:S_SIZE])
    cycle = [s_tokens[i] for i in torch.randperm(S_SIZE, generator=gen).tolist()]
    pi = {cycle[i]: cycle[(i + 1) % S_SIZE] for i in range(S_SIZE)}  # one cycle: pi^j(s) != s for j < 48
    embed = _embeddings(vocab, s_tokens, mask_id, gen)
    lm_head = torch.zeros((vocab, HIDDEN), dtype=torch.float64)
    for s in s_tokens:
        lm_head[pi[s]] = embed[s]
    return Construction(
        s_tokens, pi, embed, lm_head, _target_layer0(embed, s_tokens, gen), _drafter(embed, s_tokens, pi)
    )


def _target_layer0(embed: Any, s_tokens: list[int], gen: Any) -> dict[str, Any]:
    """Layer 0 of the target (Llama layout, 4 heads, 2 KV heads): head 0 looks at the
    previous token (rotary peak at offset 1, no other offset up to the context length
    within 24 of it) and adds a random projection of that token's identity to the residual."""
    import torch

    pairs = list(range(8))
    q, k = _peak_vector(1, pairs=pairs, weights=[1.0] * len(pairs), const_pair=None, const=0.0)
    gap = rotary_score(q, k, 1) - max(rotary_score(q, k, d) for d in range(0, 4097) if d != 1)
    n0 = float((EMBED_C / _rms(embed[s_tokens])).mean())  # input_layernorm(x)[E0] of a token
    a = (24.0 * HEAD_DIM**0.5 / gap) ** 0.5 / n0
    q_proj = torch.zeros((HEADS * HEAD_DIM, HIDDEN), dtype=torch.float64)
    k_proj = torch.zeros((2 * HEAD_DIM, HIDDEN), dtype=torch.float64)
    v_proj = torch.zeros((2 * HEAD_DIM, HIDDEN), dtype=torch.float64)
    o_proj = torch.zeros((HIDDEN, HEADS * HEAD_DIM), dtype=torch.float64)
    q_proj[:HEAD_DIM, E0] = q * a
    k_proj[:HEAD_DIM, E0] = k * a
    g = len(G_DIMS)
    v_proj[:HEAD_DIM, G_DIMS.start : G_DIMS.stop] = (
        torch.randn((HEAD_DIM, g), generator=gen, dtype=torch.float64) / g**0.5
    )
    o_proj[G_DIMS.start : G_DIMS.stop, :HEAD_DIM] = (
        torch.randn((g, HEAD_DIM), generator=gen, dtype=torch.float64) / HEAD_DIM**0.5 * PREV_WEIGHT
    )
    return {"q_proj": q_proj, "k_proj": k_proj, "v_proj": v_proj, "o_proj": o_proj}


def _rms(x: Any) -> Any:
    return (x.pow(2).mean(-1) + 1e-6).sqrt()


def _drafter(embed: Any, s_tokens: list[int], pi: dict[int, int]) -> dict[str, Any]:
    """DFlashDraftModel weights: head h predicts depth h + 1 (see the module docstring)."""
    import torch

    x = _rms_normed(embed[s_tokens])  # what input_layernorm gives each root
    x_pinv = torch.linalg.pinv(x[:, G_DIMS.start : G_DIMS.stop].T)  # [|S|, |G|]: one-hot of the root's index
    q_proj = torch.zeros((HEADS * HEAD_DIM, HIDDEN), dtype=torch.float64)
    k_proj = torch.zeros((HEADS * HEAD_DIM, HIDDEN), dtype=torch.float64)
    v_proj = torch.zeros((HEADS * HEAD_DIM, HIDDEN), dtype=torch.float64)
    o_proj = torch.zeros((HIDDEN, HEADS * HEAD_DIM), dtype=torch.float64)
    for h in range(DRAFT_DEPTHS):
        q, k = drafter_head_vectors(h + 1)
        rows = slice(h * HEAD_DIM, (h + 1) * HEAD_DIM)
        q_proj[rows, E0] = q  # every token has the E0 component: queries and keys do not depend on content
        k_proj[rows, E0] = k
        v_proj[h * HEAD_DIM : h * HEAD_DIM + len(s_tokens), G_DIMS.start : G_DIMS.stop] = x_pinv
        target = torch.stack([embed[_pi_power(pi, s, h)] for s in s_tokens])  # [|S|, H]
        o_proj[:, h * HEAD_DIM : h * HEAD_DIM + len(s_tokens)] = target.T * DRAFT_GAIN
    norm = torch.full((HEAD_DIM,), QK_NORM_WEIGHT, dtype=torch.float64)
    return {
        "layers.0.self_attn.q_proj.weight": q_proj, "layers.0.self_attn.k_proj.weight": k_proj,
        "layers.0.self_attn.v_proj.weight": v_proj, "layers.0.self_attn.o_proj.weight": o_proj,
        "layers.0.self_attn.q_norm.weight": norm, "layers.0.self_attn.k_norm.weight": norm.clone(),
    }  # fmt: skip


DRAFT_PAIRS = (0, 1)  # the two fastest rotary frequencies: the sharpest peak over 15 block offsets
QK_NORM_WEIGHT = 6.0  # after q_norm / k_norm a score is 288 x (cosine of the unit q, k): margins of ~29


def drafter_head_vectors(depth: int) -> tuple[Any, Any]:
    """q, k for the head that attends the root from block position `depth`: the rotary
    dot product peaks at offset `depth`, minus a constant (on the slowest pair, which
    barely rotates over a block) that puts every other offset 1..15 below zero, where
    the context keys (zero) outscore it."""
    import math

    theta = rope_inv_freq()
    score = lambda d: sum(math.cos(float(theta[i]) * (d - depth)) for i in DRAFT_PAIRS)  # noqa: E731
    others = max(score(d) for d in range(1, 16) if d != depth)
    const = (score(depth) + others) / 2
    return _peak_vector(depth, pairs=list(DRAFT_PAIRS), weights=[1.0] * len(DRAFT_PAIRS),
                        const_pair=HEAD_DIM // 2 - 1, const=const)  # fmt: skip


DRAFT_GAIN = 3.0  # how much the attended root outweighs the mask token's own embedding


def _pi_power(pi: dict[int, int], s: int, n: int) -> int:
    for _ in range(n):
        s = pi[s]
    return s
