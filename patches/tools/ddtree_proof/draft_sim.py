"""What the proof's drafter proposes and how deep DDTree will accept, computed on CPU.

``DraftSim`` re-implements the draft forward of sglang 0.5.23's DFlash model
(models/dflash.py ``DFlashDraftModel.forward`` -> ``DFlashDecoderLayer`` ->
``DFlashAttention``; the worker's block ``[root, MASK x (B-1)]`` at positions
P..P+B-1, embedded with the target's embedding; non-causal attention over the
context K/V the worker materialises from ``hidden_norm(fc(target hidden))``
and the block; q_norm / k_norm per head, then neox rotary; the target's LM
head on the final norm) from the drafter's saved weights. sglang's own module
needs its attention backend on a GPU; the proof's GPU run reports the real
accepts by depth next to these expectations.

``expected_accepts`` replays DDTree's acceptance with the patched
``ddtree_utils`` (best-first tree over the drafter's per-depth top-K, greedy
walk) over the target's greedy continuations (the reference streams): a
node is accepted where its path is the reference, which is exactly what the
target's argmax at each node decides.
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from . import construct as K


def _rms_norm(x: Any, w: Any, eps: float) -> Any:
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w


def _rotary(x: Any, positions: Any, head_dim: int, theta: float) -> Any:
    """neox rotary over the last dim (pairs i, i + half), x [..., n, head_dim]."""
    import torch

    half = head_dim // 2
    inv = K.rope_inv_freq(head_dim, theta).to(x.dtype)
    ang = positions.to(x.dtype)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class DraftSim:
    def __init__(self, drafter_dir: Path, target_dir: Path) -> None:
        import json

        import torch
        from safetensors.torch import load_file

        self.cfg = json.loads((drafter_dir / "config.json").read_text())
        self.w = {k: v.to(torch.float64) for k, v in load_file(str(drafter_dir / "model.safetensors")).items()}
        target = load_file(str(target_dir / "model.safetensors"))
        self.embed = target["model.embed_tokens.weight"].to(torch.float64)
        self.lm_head = target["lm_head.weight"].to(torch.float64)
        self.block = int(self.cfg["block_size"])
        self.mask = int(self.cfg["dflash_config"]["mask_token_id"])
        self.heads = int(self.cfg["num_attention_heads"])
        self.kv_heads = int(self.cfg["num_key_value_heads"])
        self.head_dim = int(self.cfg["head_dim"])
        self.eps = float(self.cfg["rms_norm_eps"])
        self.theta = float(self.cfg["rope_theta"])
        if bool(self.w["fc.weight"].abs().max() > 0):
            raise ValueError("DraftSim models a drafter whose context features are zero (fc = 0)")
        self._cache: dict[int, tuple[Any, Any]] = {}

    def topk(self, root: int, k: int, prefix_len: int = 64) -> tuple[Any, Any]:
        """Per-depth (1..B-1) top-k log-probs and ids for a block rooted at `root`."""
        import torch

        if root in self._cache:
            return self._cache[root]
        w, hd = self.w, self.head_dim
        ids = torch.tensor([root] + [self.mask] * (self.block - 1))
        pos = torch.arange(prefix_len, prefix_len + self.block)
        x = self.embed[ids]
        h = _rms_norm(x, w["layers.0.input_layernorm.weight"], self.eps)
        q = (h @ w["layers.0.self_attn.q_proj.weight"].T).view(self.block, self.heads, hd)
        kk = (h @ w["layers.0.self_attn.k_proj.weight"].T).view(self.block, self.kv_heads, hd)
        v = (h @ w["layers.0.self_attn.v_proj.weight"].T).view(self.block, self.kv_heads, hd)
        q = _rotary(_rms_norm(q, w["layers.0.self_attn.q_norm.weight"], self.eps).transpose(0, 1), pos, hd, self.theta)
        kk = _rotary(
            _rms_norm(kk, w["layers.0.self_attn.k_norm.weight"], self.eps).transpose(0, 1), pos, hd, self.theta
        )
        v = v.transpose(0, 1)
        group = self.heads // self.kv_heads
        kk, v = kk.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        # context keys/values: kv_proj(hidden_norm(fc(.))) with fc = 0 is zero -> score 0, value 0
        scores = torch.einsum("hqd,hkd->hqk", q, kk) / hd**0.5
        ctx = torch.zeros((self.heads, self.block, prefix_len), dtype=scores.dtype)
        att = torch.softmax(torch.cat([ctx, scores], dim=-1), dim=-1)[..., prefix_len:]
        out = torch.einsum("hqk,hkd->qhd", att, v).reshape(self.block, self.heads * hd)
        resid = x + out @ w["layers.0.self_attn.o_proj.weight"].T
        h2 = _rms_norm(resid, w["layers.0.post_attention_layernorm.weight"], self.eps)
        gate = h2 @ w["layers.0.mlp.gate_proj.weight"].T
        mlp = (torch.nn.functional.silu(gate) * (h2 @ w["layers.0.mlp.up_proj.weight"].T)) @ w[
            "layers.0.mlp.down_proj.weight"
        ].T
        hidden = _rms_norm(resid + mlp, w["norm.weight"], self.eps)
        logprobs = torch.log_softmax(hidden[1:] @ self.lm_head.T, dim=-1)
        top = torch.topk(logprobs, k, dim=-1)
        self._cache[root] = (top.values.float(), top.indices)
        return self._cache[root]


@dataclasses.dataclass
class Expectation:
    verify_steps: int = 0
    accepts_by_depth: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def deep_accepts(self) -> int:
        return sum(n for d, n in self.accepts_by_depth.items() if d >= 2)


def expected_accepts(sim: DraftSim, prompts: list[list[int]], streams: list[list[int]], *, budget: int,
                     topk: int) -> Expectation:  # fmt: skip
    """DDTree's verify steps and accept depths over the reference streams (one request at a time:
    acceptance does not depend on batching)."""
    import torch
    from sglang.srt.speculative import ddtree_utils as U

    out = Expectation()
    for prompt, stream in zip(prompts, streams, strict=True):
        seq, t = list(prompt), 0
        while t < len(stream):
            lp, ids = sim.topk(seq[-1], topk)
            tree = U.build_ddtree_batch(torch.tensor([seq[-1]]), lp[None], ids[None], budget)
            width = budget + 1
            predict = torch.full((1, width), -1, dtype=torch.int64)
            par, tok = tree.parents[0].tolist(), tree.tokens[0].tolist()
            for i in range(width):
                path, j = [], i
                while j > 0:
                    path.append(tok[j])
                    j = par[j]
                path.reverse()
                if bool(tree.valid[0, i]) and path == stream[t : t + len(path)] and t + len(path) < len(stream):
                    predict[0, i] = stream[t + len(path)]
            _, accept_len, _ = U.ddtree_greedy_walk(tree, predict)
            a = int(accept_len[0])
            out.verify_steps += 1
            out.accepts_by_depth[a] = out.accepts_by_depth.get(a, 0) + 1
            seq += stream[t : t + a + 1]
            t += a + 1
    out.accepts_by_depth = dict(sorted(out.accepts_by_depth.items()))
    return out
