"""Deterministic text of the simulated thinking model.

The model's raw output is ``<think>`` reasoning ``</think>`` answer. At
temperature 0 the text depends only on the prompt and the model name, never
on the speculative settings, so a lossless configuration reproduces it token
for token. With temperature > 0 the request seed (without one: a seed derived
from ``--sim-seed``, the config and the request's count, see
``generation.Generation``) samples the words from the simulated target's distribution
after its sampling parameters, each drawn the way speculative verification
draws it (``word_sampling``): the samples' distribution does not depend on the
speculative settings either, unless the ``bonus-unadjusted`` fault is on.

For a prompt that contains one of the coding-eval problems
(``repro_py/codeeval/problems.yaml``) the reasoning holds a plausible but
WRONG draft in a ```python fence, and the answer's LAST fenced block is the
correct reference.

The ``mask-offset`` fault replaces the tokens from a deterministic position
on with garbage that depends on the verify width: the silent corruption that
misaligned tree-mask offsets caused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
from collections.abc import Callable

from repro_py.codeeval import problems as codeeval_problems
from repro_py.codeeval.problems import Problem
from repro_py.simengine import tokenizer
from repro_py.simengine.word_sampling import Processing, WordPicker

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
EOS_TOKEN_ID = 163586  # the target's <|im_end|>

_WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "that",
    "is",
    "for",
    "on",
    "with",
    "as",
    "by",
    "this",
    "it",
    "be",
    "are",
    "from",
    "at",
    "or",
    "an",
    "which",
    "we",
    "can",
    "model",
    "token",
    "draft",
    "tree",
    "budget",
    "step",
    "verify",
    "cache",
    "window",
    "block",
    "layer",
    "batch",
    "request",
    "stream",
    "value",
    "result",
    "number",
    "order",
    "first",
    "next",
    "each",
    "every",
    "more",
    "less",
    "other",
    "same",
    "simple",
    "careful",
    "check",
    "compute",
    "return",
    "list",
    "item",
    "index",
    "count",
    "case",
    "edge",
    "test",
    "input",
    "output",
    "sum",
    "total",
    "path",
    "node",
    "depth",
    "width",
    "accept",
    "reject",
    "keep",
    "move",
    "start",
    "end",
    "left",
    "right",
    "small",
    "large",
    "long",
    "short",
    "because",
    "so",
    "then",
    "now",
    "also",
    "only",
    "still",
    "just",
    "here",
    "there",
    "when",
    "while",
    "after",
    "before",
    "if",
    "not",
    "think",
    "consider",
    "note",
    "assume",
    "suppose",
    "recall",
    "see",
    "look",
    "means",
    "gives",
    "holds",
    "works",
    "fails",
]
WORDS = tuple(_WORDS)
Pick = Callable[[random.Random], str]  # draws the next word
_CONNECTORS = ("First", "Then", "Next", "So", "Also", "Now", "Hence", "Still", "Finally", "Note that")
_GARBAGE = ("ю", "щ", " the", "0", "]", " ,", "@", "Ġ", " )", " nan", "\ufffd", "#", " ~", "\u200b")


@functools.lru_cache(maxsize=1)
def load_problems() -> tuple[Problem, ...]:
    """The coding-eval problems (read and validated by ``repro_py.codeeval.problems``), once per process."""
    return tuple(codeeval_problems.load_problems())


def find_problem(text: str) -> Problem | None:
    """The problem whose prompt the text contains (whitespace at the ends ignored)."""
    for problem in load_problems():
        if problem.prompt.strip() and problem.prompt.strip() in text:
            return problem
    return None


def model_name(model: str) -> str:
    """The served model's name without its directory: ``/var/lib/m/Kimi-K2.6`` -> ``Kimi-K2.6``."""
    return model.rstrip("/").rsplit("/", 1)[-1] or model


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from ``parts`` (their ``str``), the same in every process."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little")


def _uniform(rng: random.Random) -> str:
    return rng.choice(_WORDS)


def _sentence(rng: random.Random, pick: Pick = _uniform) -> str:
    n = rng.randint(7, 16)
    words = [pick(rng) for _ in range(n)]
    lead = rng.choice(_CONNECTORS) if rng.random() < 0.35 else words.pop(0).capitalize()
    return " ".join([lead, *words]) + rng.choice((".", ".", ".", ",", "?", ":")) if words else lead + "."


def _paragraphs(rng: random.Random, min_tokens: int, cap: int | None = None, pick: Pick = _uniform) -> str:
    """Paragraphs of at least ``min_tokens`` tokens; stop early once past ``cap`` (same prefix either way)."""
    out: list[str] = []
    tokens = 0
    while tokens < min_tokens and (cap is None or tokens <= cap):
        para = " ".join(_sentence(rng, pick) for _ in range(rng.randint(3, 6)))
        out.append(para)
        tokens += tokenizer.count(para) + 1
    return "\n\n".join(out)


def _problem_text(problem: Problem, rng: random.Random) -> str:
    reasoning = (
        f"The task asks for `{problem.entry_point}`. Let me read the docstring and the examples carefully "
        "before writing anything, and think about the edge cases: empty input, a single element, "
        "negative numbers, repeated values and the boundaries of every loop.\n\n"
        "A first attempt that looks right:\n\n"
        f"```python\n{problem.wrong_draft.rstrip()}\n```\n\n"
        "Let me trace the examples through this draft. The main example works, but I should check the edge "
        "cases one by one instead of trusting the happy path. "
        + _paragraphs(rng, 140)
        + "\n\nActually this draft mishandles one of those edge cases, so the final version must fix it. "
        "I will write the corrected function in the answer and keep the same signature.\n"
    )
    answer = (
        f"\n\nHere is the implementation of `{problem.entry_point}`:\n\n"
        f"```python\n{problem.reference.rstrip()}\n```\n\n"
        "It handles the empty input and the other edge cases from the docstring, and it runs in linear "
        "time apart from any sorting the problem needs."
    )
    return THINK_OPEN + reasoning + THINK_CLOSE + answer


def _free_text(rng: random.Random, natural_tokens: int, limit: int | None = None, pick: Pick = _uniform) -> str:
    """Reasoning then answer. With ``limit``, generation stops a paragraph past that many tokens:
    the caller cuts there, and the first ``limit`` tokens are the same as without it."""
    reasoning_tokens = int(natural_tokens * 0.7)
    cap = None if limit is None else limit + 64
    reasoning = _paragraphs(rng, reasoning_tokens, cap, pick)
    if cap is not None and tokenizer.count(reasoning) > cap:
        return THINK_OPEN + reasoning
    answer = _paragraphs(rng, natural_tokens - reasoning_tokens, pick=pick)
    return THINK_OPEN + reasoning + THINK_CLOSE + "\n\n" + answer


@dataclasses.dataclass(frozen=True)
class TextPlan:
    """The pieces a request will produce, and why it stops."""

    pieces: list[str]
    finish: str  # "stop" | "length"
    matched_stop: int | str | None
    garbled_from: int | None  # first garbled token index, when the mask-offset fault fired


def raw_output(
    prompt_key: str,
    *,
    model: str,
    temperature: float,
    seed: int | None,
    thinking: bool = True,
    problem_source: str | None = None,
    limit: int | None = None,
    sampling: Processing | None = None,
) -> str:
    """The complete natural output (until EOS) for a prompt.

    ``problem_source`` is the text searched for a coding problem (the last
    user message of a chat); by default the prompt itself. ``limit`` (a
    max_tokens) lets long free text stop early; the first ``limit`` tokens
    do not change. ``sampling``: how a sampled request (temperature > 0)
    draws its words (default: ``temperature`` alone, no speculation).
    """
    problem = find_problem(prompt_key if problem_source is None else problem_source)
    pick: Pick = _uniform
    if temperature > 0:
        # seeded draws depend on the model's name, not on where its directory lies (a test's is a new one each run)
        rng = random.Random(derive_seed(model_name(model), prompt_key, seed)) if seed is not None else random.Random()
        pick = WordPicker(sampling or Processing(temperature), WORDS, prompt_key)
    else:
        rng = random.Random(derive_seed(model, prompt_key, "greedy"))
    if problem is not None:
        text = _problem_text(problem, random.Random(derive_seed(model, problem.id)))
    else:
        natural = 1500 + derive_seed(model, prompt_key, "length") % 1500
        text = _free_text(rng, natural, limit if thinking else None, pick)
    if not thinking:
        text = text.split(THINK_CLOSE, 1)[1].lstrip("\n") if THINK_CLOSE in text else text
    return text


def garble_position(prompt_key: str) -> int:
    """Where the mask-offset corruption starts (a deterministic early position)."""
    return 12 + derive_seed(prompt_key, "mask-offset") % 36


def plan(
    prompt_key: str,
    *,
    model: str,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    stop: list[str] | None = None,
    ignore_eos: bool = False,
    thinking: bool = True,
    garble_width: int | None = None,
    problem_source: str | None = None,
    sampling: Processing | None = None,
) -> TextPlan:
    """Pieces of the completion, cut by max_tokens, a stop string or EOS.

    ``garble_width`` set (the verify width of a misaligned tree mask) turns on
    the mask-offset corruption from ``garble_position`` on. ``sampling``: how a
    sampled request's words are drawn (``raw_output``).
    """
    text = raw_output(
        prompt_key,
        model=model,
        temperature=temperature,
        seed=seed,
        thinking=thinking,
        problem_source=problem_source,
        limit=max_tokens,
        sampling=sampling,
    )
    all_pieces = tokenizer.pieces(text)
    if ignore_eos:
        filler = random.Random(derive_seed(model, prompt_key, "ignore_eos"))
        while len(all_pieces) < max_tokens:
            all_pieces += tokenizer.pieces("\n\n" + _paragraphs(filler, 200))
    garbled_from: int | None = None
    if garble_width is not None:
        garbled_from = garble_position(prompt_key)
        junk = random.Random(derive_seed(prompt_key, "garbage", garble_width))
        all_pieces = all_pieces[:garbled_from] + [junk.choice(_GARBAGE) for _ in all_pieces[garbled_from:]]
    finish = "stop"
    matched: int | str | None = EOS_TOKEN_ID
    pieces = all_pieces
    if len(all_pieces) > max_tokens:
        pieces = all_pieces[:max_tokens]
        finish, matched = "length", None
    elif ignore_eos:
        finish, matched = "length", None
    if stop:
        joined = ""
        for piece in pieces:
            joined += piece
            hit = next((s for s in stop if s and s in joined), None)
            if hit is not None:
                # The stop string is matched on the decoded text and is not returned.
                pieces = tokenizer.pieces(joined[: joined.index(hit)])
                finish, matched = "stop", hit
                break
    return TextPlan(pieces=pieces, finish=finish, matched_stop=matched, garbled_from=garbled_from)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """(reasoning_content, content) the way a ``<think>`` reasoning parser splits it.

    Without the closing delimiter all of the text is reasoning (the model was
    cut while thinking) and the content is empty.
    """
    body = text[len(THINK_OPEN) :] if text.startswith(THINK_OPEN) else text
    if THINK_CLOSE in body:
        reasoning, content = body.split(THINK_CLOSE, 1)
        return reasoning, content
    if text.startswith(THINK_OPEN):
        return body, ""
    return None, text
