"""Extract the candidate code from a model's FINAL answer.

A thinking model writes reasoning, then a delimiter, then its answer. Drafts
in the reasoning are not the answer: the code is the last fenced block of the
final answer. The final answer is, in order of preference:

1. ``content`` when the server separated the reasoning (``reasoning_content``
   is a string), cut after a delimiter if one still appears in it;
2. the text after the last response delimiter (``</think>`` for kimi_k2,
   ``◁/think▷`` for kimi);
3. the whole content when there is no reasoning at all.

A reply that opened ``<think>`` and never closed it has no final answer. The
result says why no code was found, so a caller can tell a truncated answer
from one that has no code.
"""

from __future__ import annotations

import dataclasses

DELIMITERS: tuple[str, ...] = ("</think>", "◁/think▷")
OPENERS: tuple[str, ...] = ("<think>", "◁think▷")
PYTHON_LANGS = frozenset({"", "python", "py", "python3"})


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    code: str
    closed: bool


@dataclasses.dataclass(frozen=True)
class Extraction:
    code: str | None
    source: str  # where the final answer came from
    final_text: str
    reason: str | None  # why ``code`` is None
    unterminated: bool  # the final answer ends inside an unclosed fence
    reasoning_blocks: int  # fenced blocks in the reasoning (ignored)


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced code block, in order; the last may be unclosed (``closed=False``)."""
    blocks: list[Block] = []
    lang = ""
    buf: list[str] | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if buf is None:
            if stripped.startswith("```"):
                rest = stripped[3:]
                if "```" in rest:  # one-line block: ```python x = 1```
                    info, _, tail = rest.partition(" ")
                    body = tail.rsplit("```", 1)[0] if tail else ""
                    blocks.append(Block(lang=info.strip().lower(), code=body.strip() + "\n", closed=True))
                    continue
                lang = rest.strip().split(" ")[0].lower() if rest.strip() else ""
                buf = []
            continue
        if stripped.startswith("```"):
            blocks.append(Block(lang=lang, code="\n".join(buf) + "\n", closed=True))
            buf = None
        elif stripped.endswith("```"):
            buf.append(line.rstrip()[:-3])
            blocks.append(Block(lang=lang, code="\n".join(buf) + "\n", closed=True))
            buf = None
        else:
            buf.append(line)
    if buf is not None:
        blocks.append(Block(lang=lang, code="\n".join(buf) + "\n", closed=False))
    return blocks


def last_code_block(text: str) -> tuple[str | None, bool, str | None]:
    """(code of the last closed Python-or-untagged block, unterminated?, reason if none)."""
    blocks = fenced_blocks(text)
    if not blocks:
        return None, False, "the final answer has no fenced code block"
    if not blocks[-1].closed:
        return None, True, "the last code block of the final answer is never closed"
    python = [b for b in blocks if b.lang in PYTHON_LANGS]
    chosen = python[-1] if python else blocks[-1]
    if not chosen.code.strip():
        return None, False, "the last code block of the final answer is empty"
    return chosen.code, False, None


def split_final(content: str | None, reasoning: str | None) -> tuple[str, str, str, str | None]:
    """(reasoning text, final answer text, source, reason the final answer is missing)."""
    text = content or ""
    if reasoning is not None:
        for delim in DELIMITERS:
            if delim in text:
                head, _, tail = text.rpartition(delim)
                return reasoning + head, tail, f"content after {delim} (server-separated reasoning)", None
        reason = None if text.strip() else "the final answer is empty (reasoning_content only)"
        return reasoning, text, "content (server-separated reasoning)", reason
    for delim in DELIMITERS:
        if delim in text:
            head, _, tail = text.rpartition(delim)
            return head, tail, f"content after {delim}", None
    lead = text.lstrip()
    for opener in OPENERS:
        if lead.startswith(opener):
            return text, "", "content (reasoning never closed)", (
                f"the reasoning opened with {opener} and never ended: there is no final answer"
            )
    return "", text, "content (no reasoning delimiter)", None


def extract_final_code(content: str | None, reasoning: str | None = None) -> Extraction:
    """The last fenced block of the final answer, or ``code=None`` with the reason."""
    reasoning_text, final, source, missing = split_final(content, reasoning)
    in_reasoning = len(fenced_blocks(reasoning_text)) if reasoning_text else 0
    if missing is not None:
        return Extraction(None, source, final, missing, False, in_reasoning)
    code, unterminated, why = last_code_block(final)
    return Extraction(code, source, final, why, unterminated, in_reasoning)
