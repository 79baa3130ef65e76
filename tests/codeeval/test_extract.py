from __future__ import annotations

import re

from repro_py.codeeval.extract import extract_final_code, fenced_blocks

DRAFT = "def add(a, b):\n    return a - b\n"
RIGHT = "def add(a, b):\n    return a + b\n"
REPLY = (
    "<think>Let me draft something first.\n```python\n" + DRAFT + "```\nHmm, that subtracts. Fix it.</think>\n"
    "Here is the function:\n```python\n" + RIGHT + "```\n"
)


def first_block_anywhere(text: str) -> str | None:
    """The extractor the field used: the first fenced block anywhere in the reply."""
    match = re.search(r"```(?:python)?\n(.*?)```", text, re.S)
    return match.group(1) if match else None


def test_final_answer_block_wins_over_reasoning_draft() -> None:
    got = extract_final_code(REPLY)
    assert got.code == RIGHT
    assert got.source == "content after </think>"
    assert got.reasoning_blocks == 1


def test_first_block_extractor_takes_the_wrong_draft() -> None:
    # The field's extractor returns the draft from the reasoning: the model looked wrong while it was right.
    assert first_block_anywhere(REPLY) == DRAFT
    assert extract_final_code(REPLY).code != first_block_anywhere(REPLY)


def test_server_separated_reasoning() -> None:
    reasoning = "Draft:\n```python\n" + DRAFT + "```\n"
    content = "Answer:\n```python\n" + RIGHT + "```"
    got = extract_final_code(content, reasoning)
    assert got.code == RIGHT
    assert got.source == "content (server-separated reasoning)"
    assert got.reasoning_blocks == 1


def test_last_block_of_final_answer() -> None:
    content = "```python\nx = 1\n```\nbetter:\n```python\n" + RIGHT + "```\n"
    assert extract_final_code(content).code == RIGHT


def test_python_block_preferred_over_trailing_output_block() -> None:
    content = "```python\n" + RIGHT + "```\nOutput:\n```text\n3\n```\n"
    assert extract_final_code(content).code == RIGHT


def test_reasoning_never_closed_has_no_final_answer() -> None:
    got = extract_final_code("<think>Draft:\n```python\n" + DRAFT + "```\nstill thinking")
    assert got.code is None
    assert "never ended" in (got.reason or "")


def test_unterminated_final_block() -> None:
    got = extract_final_code("</think>Answer:\n```python\ndef add(a, b):\n    return a +")
    assert got.code is None
    assert got.unterminated
    assert "never closed" in (got.reason or "")


def test_no_code_at_all() -> None:
    got = extract_final_code("I cannot help with that.")
    assert got.code is None
    assert got.reason == "the final answer has no fenced code block"


def test_empty_final_answer_with_separated_reasoning() -> None:
    got = extract_final_code("", "```python\n" + DRAFT + "```")
    assert got.code is None
    assert "empty" in (got.reason or "")


def test_kimi_vl_delimiter() -> None:
    got = extract_final_code("◁think▷```python\n" + DRAFT + "```◁/think▷```python\n" + RIGHT + "```")
    assert got.code == RIGHT


def test_one_line_and_inline_closing_fences() -> None:
    blocks = fenced_blocks("```python x = 1```\n```py\ny = 2```\n")
    assert [b.code for b in blocks] == ["x = 1\n", "y = 2\n"]
    assert all(b.closed for b in blocks)
