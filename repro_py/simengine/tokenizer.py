"""A small deterministic tokenizer shared by prompt counting, generation and ``/tokenize``.

Pieces: a special marker (``<think>``, ``</think>``, ``<|name|>``) as one
piece; an optional single leading space followed by a run of letters (split
into chunks of at most 6), a single digit, or one other character; runs of
whitespace other than one leading space are their own pieces. Token ids are a
stable hash of the piece into the target's vocabulary size. Concatenating the
pieces gives back the text exactly, and tokenizing a concatenation of
generated pieces gives back the same pieces, so every count agrees.
"""

from __future__ import annotations

import hashlib
import re

VOCAB_SIZE = 163840  # Kimi K2 vocabulary size
MAX_LETTERS = 6
_PIECE_RE = re.compile(r"<\|[a-z_]+\|>|</?think>| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]|\s+?(?=\s\S)|\s+")


def pieces(text: str) -> list[str]:
    out: list[str] = []
    for match in _PIECE_RE.finditer(text):
        piece = match.group(0)
        body = piece.lstrip(" ")
        if body.isalpha() and len(body) > MAX_LETTERS:
            lead = piece[: len(piece) - len(body)]
            first = True
            for i in range(0, len(body), MAX_LETTERS):
                chunk = body[i : i + MAX_LETTERS]
                out.append((lead + chunk) if first else chunk)
                first = False
        else:
            out.append(piece)
    return out


def token_id(piece: str) -> int:
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % VOCAB_SIZE


def encode(text: str) -> list[int]:
    return [token_id(p) for p in pieces(text)]


def count(text: str) -> int:
    return len(pieces(text))
