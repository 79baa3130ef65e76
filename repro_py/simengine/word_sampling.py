"""How the simulated model samples its words, and how speculative verification draws them.

The simulated target's next-word distribution depends on the previous word (a bigram model):
the vocabulary (``textgen``'s word list) in an order fixed by that word, with Zipf-like logits
``-ZIPF * ln(1 + rank)``. A sampled request processes them as sglang does: logits / temperature,
softmax, then top_k, top_p and min_p (``processed``).

Each word of a sampled request is drawn by target-only tree sampling, the way a speculative server
verifies sampled requests (sglang's ``tree_speculative_sampling_target_only`` with both thresholds
at 1.0): the drafted children of the node (the drafter's top candidates: the top ``children``
words, 1 for a DFLASH chain, the top-K cap for DDTree, none without speculation) are walked in
order with one uniform coin, the first whose cumulative target probability passes the coin is
accepted, and when none is, the bonus word is drawn from the target mass the children did not
cover. That is exactly the target's own distribution (lossless in distribution) whatever the
children are: a healthy engine's samples do not depend on its speculative settings.

The ``bonus-unadjusted`` fault (``faults``) draws that bonus word from the whole target
distribution instead: the drafted words then come out too often. Greedy requests never reach
this module, so only a distributional check sees the fault.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import random

ZIPF = 1.2  # logit slope over the rank: at T = 1 the top word has about 28% of the mass


def _seed(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


@functools.lru_cache(maxsize=4096)
def _order(vocab: tuple[str, ...], context: str) -> tuple[int, ...]:
    """The vocabulary's indices in the order of the target's preference after ``context``."""
    order = list(range(len(vocab)))
    random.Random(_seed("bigram", context)).shuffle(order)
    return tuple(order)


@dataclasses.dataclass(frozen=True)
class Processing:
    """A request's sampling parameters, as the simulated model applies them, and how it is verified."""

    temperature: float
    top_p: float = 1.0
    top_k: int = 1 << 30
    min_p: float = 0.0
    children: int = 0  # drafted children per node: 0 no speculation, 1 a DFLASH chain, the top-K cap for DDTree
    bonus_unadjusted: bool = False  # the bonus-unadjusted fault

    def processed(self, vocab: tuple[str, ...], context: str) -> tuple[tuple[int, float], ...]:
        """``(word index, probability)`` in the target's order after temperature, top_k, top_p and min_p,
        renormalised (words cut out are left out)."""
        return _processed(vocab, context, (self.temperature, self.top_p, self.top_k, self.min_p))

    def draw(self, rng: random.Random, vocab: tuple[str, ...], context: str) -> str:
        """One word after ``context``, drawn by the tree walk over the drafted children (see the module doc)."""
        dist = self.processed(vocab, context)
        children = dist[: self.children]
        coin = rng.random()
        covered = 0.0
        for index, p in children:
            covered += p
            if coin < covered:
                return vocab[index]
        residual = dist if self.bonus_unadjusted else dist[len(children) :]
        if not residual:  # the children cover every word: only rounding left the coin past them
            return vocab[children[-1][0]]
        return vocab[_weighted(rng, residual)]


@functools.lru_cache(maxsize=4096)
def _processed(
    vocab: tuple[str, ...], context: str, params: tuple[float, float, int, float]
) -> tuple[tuple[int, float], ...]:
    temperature, top_p, top_k, min_p = params
    order = _order(vocab, context)
    logits = [-ZIPF * math.log(1 + rank) / temperature for rank in range(len(order))]
    top = max(logits)
    weights = [math.exp(z - top) for z in logits][: max(1, min(top_k, len(order)))]
    total = sum(weights)
    probs = [w / total for w in weights]
    kept, mass = 0, 0.0
    for p in probs:  # top_p: the smallest prefix whose mass reaches top_p (the crossing word included)
        kept += 1
        mass += p
        if mass >= top_p:
            break
    probs = [p for p in probs[:kept] if p >= min_p * probs[0]]  # a prefix: probs decrease
    total = sum(probs)
    return tuple((order[i], p / total) for i, p in enumerate(probs))


def _weighted(rng: random.Random, dist: tuple[tuple[int, float], ...]) -> int:
    total = sum(p for _, p in dist)
    point = rng.random() * total
    for index, p in dist:
        point -= p
        if point < 0.0:
            return index
    return dist[-1][0]


class WordPicker:
    """Draws the words of one sampled request in order, each after the previous one."""

    def __init__(self, processing: Processing, vocab: tuple[str, ...], prompt_key: str) -> None:
        self.processing = processing
        self.vocab = vocab
        self.context = "prompt:" + prompt_key[-200:]

    def __call__(self, rng: random.Random) -> str:
        word = self.processing.draw(rng, self.vocab, self.context)
        self.context = word
        return word


def walk_distribution(processing: Processing, vocab: tuple[str, ...], context: str) -> dict[int, float]:
    """The exact distribution of ``Processing.draw`` (for tests): each drafted child's own probability, plus
    what the bonus adds (nothing for a child unless the bonus is unadjusted)."""
    dist = processing.processed(vocab, context)
    children = dist[: processing.children]
    covered = sum(p for _, p in children)
    out = {index: p for index, p in children}
    residual = dist if processing.bonus_unadjusted else dist[len(children) :]
    mass = sum(p for _, p in residual) or 1.0
    for index, p in residual:
        out[index] = out.get(index, 0.0) + (1.0 - covered) * p / mass
    return out
