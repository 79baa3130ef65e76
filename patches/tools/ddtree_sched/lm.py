"""The stand-in models of the scheduler-path replay: a toy target, a drafter that
agrees with it often, and the two KV caches they read and write.

What the GPU computes is replaced by arithmetic on token ids, so that every
read of the KV cache is checked: a KV slot holds the (token, position) that
was written into it. The target's next token is a fixed function of the
whole sequence it attends to (``next_token``), so a verify that reads a slot
of another request, a slot never written, a stale slot after a wrong KV move,
or a tree node with the wrong ancestors produces a different token and the
request's output stops matching the target's greedy continuation, which the
replay computes independently. Reads are also checked directly (positions,
unwritten slots) and counted.

The drafter reads its own KV cache (written only by the worker's draft-KV
write-back) and proposes the target's continuation with probability
``agree`` per depth (otherwise a wrong token ranks first and the right one
second or not at all): deep acceptances happen, so multi-node KV moves and
the write-back of accepted paths are exercised.
"""

# ruff: noqa: PLC0415 -- torch/sglang come from the CPU venv and the patched tree on sys.path

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any

VOCAB = 48
MASK_TOKEN = VOCAB - 1  # the DFlash mask token; the target never emits it


def next_token(context: list[int]) -> int:
    """The target's greedy next token after ``context`` (a fixed mixing function of
    the last three tokens and the length: positions matter)."""
    a = context[-1] if context else 0
    b = context[-2] if len(context) > 1 else 7
    c = context[-3] if len(context) > 2 else 11
    h = (a * 1000003) ^ (b * 10007) ^ (c * 101) ^ (len(context) * 7919)
    h = (h ^ (h >> 7)) * 2654435761 % (1 << 32)
    return h % (VOCAB - 1)


_M32 = 1 << 32
_TABLE_ROWS = 4093  # a prime: context hashes spread over the rows


@functools.lru_cache(maxsize=1)
def _uniform_table() -> Any:
    """Fixed uniforms in [0, 1), one row per context hash class (seeded: the same every run)."""
    import torch

    return torch.rand((_TABLE_ROWS, VOCAB), generator=torch.Generator().manual_seed(48_271))


def target_logits_torch(a: Any, b: Any, c: Any, length: Any) -> Any:
    """The toy target's logits over the vocabulary, vectorised: int64 tensors of
    the last three tokens and the length of each context -> float32 [n, VOCAB].

    Its argmax is ``next_token`` (the greedy token gets 2.5; a few "plausible"
    tokens, chosen by the context's hash, get up to 2.0; the rest -6..-3; the
    mask token -30), so the greedy checks of the replay hold, and sampling has
    a few likely tokens per step: at temperature 1 the greedy token has about
    half the mass, and top_p 0.9 keeps about four tokens.
    """
    import torch

    h = (a * 1000003) ^ (b * 10007) ^ (c * 101) ^ (length * 7919)
    h = (h ^ (h >> 7)) * 2654435761 % _M32
    greedy = h % (VOCAB - 1)
    r = _uniform_table().to(h.device)[h % _TABLE_ROWS]
    plausible = r < 0.08
    logits = torch.where(plausible, 2.0 * (1.0 - r / 0.08), -3.0 - 3.0 * r)
    logits[torch.arange(h.shape[0], device=h.device), greedy] = 2.5
    logits[:, MASK_TOKEN] = -30.0
    return logits


def context_keys(context: list[int]) -> tuple[int, int, int, int]:
    """(last token, the one before, the one before that, length), as next_token reads them."""
    a = context[-1] if context else 0
    b = context[-2] if len(context) > 1 else 7
    c = context[-3] if len(context) > 2 else 11
    return a, b, c, len(context)


def target_logits(context: list[int]) -> Any:
    """The toy target's logits after ``context`` (float32 [VOCAB]); argmax == next_token."""
    import torch

    keys = [torch.tensor([k], dtype=torch.int64) for k in context_keys(context)]
    return target_logits_torch(*keys)[0]


def greedy_continuation(context: list[int], n: int) -> list[int]:
    seq = list(context)
    out = []
    for _ in range(n):
        t = next_token(seq)
        out.append(t)
        seq.append(t)
    return out


@dataclasses.dataclass
class KVErrors:
    """Reads that found something other than what the request wrote there."""

    target_wrong_token: int = 0  # a prefix slot holding a token the request never had there
    target_wrong_position: int = 0  # a prefix slot holding another position's KV
    target_unwritten: int = 0  # a prefix slot never written
    mask_prefix_hidden: int = 0  # a verify row that cannot see its whole prefix
    node_position: int = 0  # a tree node whose position is not P + depth
    draft_wrong_token: int = 0
    draft_wrong_position: int = 0
    draft_unwritten: int = 0
    writeback_mismatch: int = 0  # draft KV written with a hidden state of another position
    first: str | None = None

    def note(self, field: str, text: str) -> None:
        setattr(self, field, getattr(self, field) + 1)
        if self.first is None:
            self.first = text

    @property
    def total(self) -> int:
        return sum(v for k, v in dataclasses.asdict(self).items() if k != "first")


class KVStore:
    """One KV cache: the (token, position) written into each slot, -1 when never written."""

    def __init__(self, size: int) -> None:
        import torch

        self.tok = torch.full((size,), -1, dtype=torch.int64)
        self.pos = torch.full((size,), -1, dtype=torch.int64)

    def write(self, slots: Any, tokens: Any, positions: Any) -> None:
        self.tok[slots] = tokens.to(self.tok.dtype)
        self.pos[slots] = positions.to(self.pos.dtype)

    def read_prefix(
        self, slots: Any, errors: KVErrors, kind: str, where: str, expected: list[int] | None = None
    ) -> list[int]:
        """The tokens at ``slots`` (positions 0..n-1 of one request), checking each
        holds the KV of its own position and, given the request's sequence
        (``expected``), its own token."""
        tok = self.tok[slots].tolist()
        pos = self.pos[slots].tolist()
        for j, (t, p) in enumerate(zip(tok, pos, strict=True)):
            if t < 0:
                errors.note(
                    f"{kind}_unwritten", f"{where}: {kind} KV slot {int(slots[j])} (position {j}) never written"
                )
            elif p != j:
                errors.note(
                    f"{kind}_wrong_position",
                    f"{where}: {kind} KV slot {int(slots[j])} read as position {j} holds position {p}",
                )
            elif expected is not None and j < len(expected) and t != expected[j]:
                errors.note(
                    f"{kind}_wrong_token",
                    f"{where}: {kind} KV slot {int(slots[j])} at position {j} holds token {t}, "
                    f"the request has {expected[j]}",
                )
        return tok


class ToyPool:
    """The target's KV pool as the worker reaches it (``get_kvcache()``): the KV move
    after a verify gathers every source before it scatters, as SGLang's pools do."""

    def __init__(self, size: int) -> None:
        self.store = KVStore(size + 1)
        self.moves = 0
        self.moved_rows = 0

    def move_kv_cache(self, tgt_loc: Any, src_loc: Any) -> None:
        tok = self.store.tok[src_loc].clone()
        pos = self.store.pos[src_loc].clone()
        self.store.tok[tgt_loc] = tok
        self.store.pos[tgt_loc] = pos
        self.moves += 1
        self.moved_rows += int((tgt_loc != src_loc).sum())


def draft_logits(context: list[int], block: int, agree: float, seed: int) -> list[list[float]]:
    """Per-depth logits (depths 1..block-1) of the stand-in drafter after ``context``
    (which ends with the block's root token)."""
    g = greedy_continuation(context, block - 1)
    rows = []
    for d in range(block - 1):
        rng = random.Random((seed * 1_000_003 + len(context) * 8191 + d * 131 + sum(context[-4:])) % (1 << 62))
        row = [rng.uniform(-4.0, 0.0) for _ in range(VOCAB)]
        row[MASK_TOKEN] = -30.0
        if rng.random() < agree:
            row[g[d]] = 6.0
        else:
            wrong = rng.choice([t for t in range(VOCAB - 1) if t != g[d]])
            row[wrong] = 6.0
            row[g[d]] = 5.0 if rng.random() < 0.5 else -10.0
        rows.append(row)
    return rows
