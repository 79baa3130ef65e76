"""Deterministic text, the coding problems, the thinking format and the mask-offset garbling."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from repro_py.simengine import textgen, tokenizer

PROBLEMS = yaml.safe_load((Path(__file__).resolve().parents[2] / "repro_py/codeeval/problems.yaml").read_text())
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def test_problems_file_format() -> None:
    assert len(PROBLEMS) >= 12
    ids = [p["id"] for p in PROBLEMS]
    assert len(set(ids)) == len(ids)
    for p in PROBLEMS:
        assert set(p) == {"id", "prompt", "entry_point", "reference", "wrong_draft", "tests"}
        assert f"def {p['entry_point']}(" in p["prompt"]
        assert p["entry_point"] in p["tests"]


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p["id"] for p in PROBLEMS])
def test_reference_passes_and_wrong_draft_fails(problem: dict[str, str]) -> None:
    ns: dict[str, object] = {}
    exec(problem["reference"], ns)
    exec(problem["tests"], ns)
    ns = {}
    exec(problem["wrong_draft"], ns)
    with pytest.raises(AssertionError):
        exec(problem["tests"], ns)


def test_problem_answer_structure_first_block_wrong_last_block_right() -> None:
    for p in textgen.load_problems():
        plan = textgen.plan(f"Complete this function.\n\n{p.prompt}", model="m", max_tokens=1024)
        assert plan.finish == "stop"
        text = "".join(plan.pieces)
        assert text.startswith(textgen.THINK_OPEN) and textgen.THINK_CLOSE in text
        blocks = FENCE.findall(text)
        assert blocks[0].strip() == p.wrong_draft.strip()  # the extractor that takes the first block fails
        assert blocks[-1].strip() == p.reference.strip()
        reasoning, content = textgen.split_reasoning(text)
        assert reasoning is not None and p.wrong_draft.strip() in reasoning
        assert FENCE.findall(content)[-1].strip() == p.reference.strip()
        assert tokenizer.count(reasoning) >= 250  # a few hundred tokens of reasoning
        short = textgen.plan(p.prompt, model="m", max_tokens=128)
        assert short.finish == "length" and len(short.pieces) == 128
        assert textgen.THINK_CLOSE not in "".join(short.pieces)


def test_greedy_text_depends_only_on_prompt_and_model() -> None:
    a = textgen.plan("Tell me about trees.", model="m", max_tokens=300)
    b = textgen.plan("Tell me about trees.", model="m", max_tokens=300)
    c = textgen.plan("Tell me about trees!", model="m", max_tokens=300)
    d = textgen.plan("Tell me about trees.", model="other", max_tokens=300)
    assert a.pieces == b.pieces
    assert a.pieces not in (c.pieces, d.pieces)
    longer = textgen.plan("Tell me about trees.", model="m", max_tokens=600)
    assert longer.pieces[:300] == a.pieces  # a longer budget extends the same text


def test_sampling_uses_the_request_seed() -> None:
    s1 = textgen.plan("x", model="m", max_tokens=100, temperature=0.7, seed=1)
    s1b = textgen.plan("x", model="m", max_tokens=100, temperature=0.7, seed=1)
    s2 = textgen.plan("x", model="m", max_tokens=100, temperature=0.7, seed=2)
    greedy = textgen.plan("x", model="m", max_tokens=100)
    assert s1.pieces == s1b.pieces
    assert s1.pieces not in (s2.pieces, greedy.pieces)


def test_garbling_starts_at_a_deterministic_position() -> None:
    clean = textgen.plan("Explain caching.", model="m", max_tokens=200)
    g17 = textgen.plan("Explain caching.", model="m", max_tokens=200, garble_width=17)
    g17b = textgen.plan("Explain caching.", model="m", max_tokens=200, garble_width=17)
    g33 = textgen.plan("Explain caching.", model="m", max_tokens=200, garble_width=33)
    pos = g17.garbled_from
    assert pos is not None and pos < 60
    assert g17.pieces[:pos] == clean.pieces[:pos]
    assert g17.pieces[pos:] != clean.pieces[pos:]
    assert g17.pieces == g17b.pieces and g17.pieces != g33.pieces


def test_tokenizer_roundtrip_and_counts() -> None:
    for text in ("Hello, world!\n\n  x = [1, 22]", "<think>a</think>b", "", "internationalization"):
        assert "".join(tokenizer.pieces(text)) == text
        assert tokenizer.count(text) == len(tokenizer.encode(text))
    plan = textgen.plan("count me", model="m", max_tokens=250)
    assert tokenizer.count("".join(plan.pieces)) == len(plan.pieces)


def test_stop_string_and_ignore_eos() -> None:
    plan = textgen.plan("p", model="m", max_tokens=400, stop=["."])
    assert plan.finish == "stop" and plan.matched_stop == "." and "." not in "".join(plan.pieces)
    long = textgen.plan(textgen.load_problems()[0].prompt, model="m", max_tokens=3000, ignore_eos=True)
    assert len(long.pieces) == 3000 and long.finish == "length"
