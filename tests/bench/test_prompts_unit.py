from __future__ import annotations

import asyncio

from repro_py.bench.prompts import BuiltPrompt, check_prompt_tokens, filler, prompt_tolerance, search_word_count
from repro_py.simengine import tokenizer


def make(n: int) -> BuiltPrompt:
    return BuiltPrompt(target_tokens=0, words=filler(n, 7), expected_prompt_tokens=0, template_overhead=0,
                       measured_with="test")


def test_search_hits_target_with_a_real_tokenizer() -> None:
    async def measure(n: int) -> int:
        return tokenizer.count(make(n).text()) + 5

    base = tokenizer.count(make(0).text()) + 5
    for target in (60, 1024, 4096):
        built = asyncio.run(search_word_count(target, base, measure, make, max_rounds=12))
        assert abs(built.expected_prompt_tokens - target) <= 1, (target, built.expected_prompt_tokens)


def test_variants_rotate_the_same_words() -> None:
    p = make(50)
    a, b = p.text(0), p.text(1)
    assert a != b
    assert sorted(a.split()) == sorted(b.split())
    assert tokenizer.count(a) == tokenizer.count(b)


def test_prompt_token_check() -> None:
    assert prompt_tolerance(60) == 4
    assert prompt_tolerance(8192) == 164
    assert check_prompt_tokens(1024, [1024, 1020, 1030]) is None
    reason = check_prompt_tokens(1024, [1024, 900])
    assert reason is not None and "900" in reason and "1024" in reason
