"""Prompts of a requested length in tokens, measured by the server's tokenizer.

A prompt is an instruction followed by filler words. Its length is measured
with ``POST /tokenize`` and adjusted until the chat request is expected to
hold the requested number of prompt tokens; the chat template's own tokens
(the difference between ``usage.prompt_tokens`` of a probe request and the
tokenized length of its text) are measured once and subtracted. Without
``/tokenize`` the chat probe itself measures each candidate.

Each request in a cell gets the same words in a rotated order, so the prefix
cache cannot serve one request's prompt to the next while the token count
stays the same. What the server then counts is checked against the target by
the matrix (``check_prompt_tokens``).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from repro_py.endpoint import Endpoint

INSTRUCTION = "Read the notes below, then write a long and detailed essay that discusses every one of them.\nNotes:"
_VOCAB_TEXT = (
    "river mountain garden window letter silver market winter engine harbor forest pattern signal "
    "bridge candle orange planet thunder meadow copper lantern valley marble rocket shadow island "
    "ladder pepper velvet canyon glacier falcon compass whistle blanket cotton feather harvest "
    "kettle mirror needle orchard pillow quarry ribbon saddle timber tunnel violin wagon yellow "
    "anchor basket cactus dragon ember fabric garlic hammer igloo jacket kernel lemon magnet"
)
_VOCAB = tuple(_VOCAB_TEXT.split(" "))
PROBE_TEXT = "Say hello."


class PromptError(RuntimeError):
    """The prompt could not be built to the requested length; the message says why."""


@dataclasses.dataclass(frozen=True)
class BuiltPrompt:
    target_tokens: int
    words: tuple[str, ...]
    expected_prompt_tokens: int  # what the server should report in usage.prompt_tokens
    template_overhead: int
    measured_with: str  # "tokenize" | "chat-probe"

    def text(self, variant: int = 0) -> str:
        """The prompt text for request ``variant`` (filler rotated by the variant)."""
        if not self.words:
            return INSTRUCTION
        shift = (variant * 7) % len(self.words)
        rotated = self.words[shift:] + self.words[:shift]
        return INSTRUCTION + " " + " ".join(rotated)

    def messages(self, variant: int = 0) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.text(variant)}]


def filler(n: int, seed: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    return tuple(rng.choice(_VOCAB) for _ in range(n))


async def tokenize_count(session: aiohttp.ClientSession, endpoint: Endpoint, text: str) -> int | None:
    """Token count of ``text`` from ``POST /tokenize``; ``None`` if the server has no such endpoint."""
    async with session.post(
        endpoint.url("/tokenize"), json={"prompt": text}, headers=endpoint.headers(),
        timeout=aiohttp.ClientTimeout(total=60),
    ) as resp:
        if resp.status in (404, 405):
            return None
        if resp.status != 200:
            raise PromptError(f"POST /tokenize returned HTTP {resp.status}: {(await resp.text())[:200]!r}")
        body: Any = await resp.json(content_type=None)
    count = body.get("count") if isinstance(body, dict) else None
    if not isinstance(count, int):
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if isinstance(tokens, list):
            return len(tokens)
        raise PromptError(f"POST /tokenize answered without a count: {str(body)[:200]}")
    return count


async def chat_prompt_tokens(session: aiohttp.ClientSession, endpoint: Endpoint, text: str) -> int:
    """``usage.prompt_tokens`` of a one-token, non-streaming chat request with ``text`` as the user message."""
    body = {
        "model": endpoint.model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 1,
        "temperature": 0.0,
        "stream": False,
    }
    async with session.post(
        endpoint.url("/v1/chat/completions"), json=body, headers=endpoint.headers(),
        timeout=aiohttp.ClientTimeout(total=300),
    ) as resp:
        if resp.status != 200:
            raise PromptError(f"chat probe returned HTTP {resp.status}: {(await resp.text())[:200]!r}")
        reply: Any = await resp.json(content_type=None)
    usage = reply.get("usage") if isinstance(reply, dict) else None
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(count, int):
        raise PromptError("chat probe reply has no usage.prompt_tokens")
    return count


class PromptBuilder:
    """Builds prompts for one server; measures the chat-template overhead once."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: Endpoint) -> None:
        self._session = session
        self._endpoint = endpoint
        self._overhead: int | None = None
        self._use_tokenize: bool | None = None
        self._built: dict[tuple[int, int], BuiltPrompt] = {}

    async def _prepare(self) -> None:
        if self._use_tokenize is not None:
            return
        probe_count = await tokenize_count(self._session, self._endpoint, PROBE_TEXT)
        chat_count = await chat_prompt_tokens(self._session, self._endpoint, PROBE_TEXT)
        if probe_count is None:
            self._use_tokenize = False
            self._overhead = 0
        else:
            self._use_tokenize = True
            self._overhead = max(0, chat_count - probe_count)

    @property
    def template_overhead(self) -> int | None:
        return self._overhead

    async def _measure(self, text: str) -> int:
        """Expected ``usage.prompt_tokens`` of a chat request carrying ``text``."""
        if self._use_tokenize:
            count = await tokenize_count(self._session, self._endpoint, text)
            if count is None:
                raise PromptError("POST /tokenize disappeared while building a prompt")
            assert self._overhead is not None
            return count + self._overhead
        return await chat_prompt_tokens(self._session, self._endpoint, text)

    async def build(self, target_tokens: int, *, seed: int = 0, max_rounds: int = 12) -> BuiltPrompt:
        """A prompt whose chat request holds ``target_tokens`` prompt tokens (as close as the words allow).

        Built once per (length, seed) for this server; later cells of the same length reuse it.
        """
        key = (target_tokens, seed)
        if key in self._built:
            return self._built[key]
        await self._prepare()
        assert self._overhead is not None
        method = "tokenize" if self._use_tokenize else "chat-probe"

        def make(n: int) -> BuiltPrompt:
            return BuiltPrompt(target_tokens, filler(n, seed), 0, self._overhead or 0, method)

        base = await self._measure(make(0).text())
        if base > target_tokens:
            raise PromptError(
                f"context {target_tokens} is shorter than the fixed instruction and chat template "
                f"({base} tokens); use a context of at least {base}"
            )
        built = await search_word_count(
            target_tokens, base, lambda n: self._measure(make(n).text()), make, max_rounds
        )
        self._built[key] = built
        return built


async def search_word_count(
    target: int,
    base: int,
    measure: Callable[[int], Awaitable[int]],
    make: Callable[[int], BuiltPrompt],
    max_rounds: int,
) -> BuiltPrompt:
    """Find the word count whose measured length is closest to ``target`` (preferring not above it)."""
    measured: dict[int, int] = {0: base}
    n = max(0, target - base)
    for _ in range(max_rounds):
        if n not in measured:
            measured[n] = await measure(n)
        got = measured[n]
        if got == target:
            break
        # Tokens per word from the measurements so far (at least one point besides 0 once n > 0).
        per_word = (got - base) / n if n > 0 and got > base else 1.0
        step = round((target - got) / per_word)
        if step == 0:
            step = 1 if got < target else -1
        nxt = max(0, n + step)
        if nxt in measured:
            # Oscillating between neighbours: settle on the best one seen.
            break
        n = nxt
    best_n = min(measured, key=lambda k: (abs(measured[k] - target), measured[k] > target))
    built = make(best_n)
    return dataclasses.replace(built, expected_prompt_tokens=measured[best_n])


def prompt_tolerance(target: int, *, abs_tol: int = 4, rel_tol: float = 0.02) -> int:
    """Allowed difference between the target and the server's prompt token count."""
    return max(abs_tol, round(rel_tol * target))


def check_prompt_tokens(target: int, reported: list[int], *, abs_tol: int = 4, rel_tol: float = 0.02) -> str | None:
    """``None`` if every reported count is within tolerance of ``target``; else the reason."""
    tol = prompt_tolerance(target, abs_tol=abs_tol, rel_tol=rel_tol)
    bad = [r for r in reported if abs(r - target) > tol]
    if not bad:
        return None
    return (
        f"server reported prompt_tokens {min(bad)}..{max(bad)} for {len(bad)} of {len(reported)} requests; "
        f"requested context {target} (tolerance {tol})"
    )
