"""The model directories the engine is started with: their ``config.json``, read as sglang 0.5.23 reads it.

A refusal is a ``CliError`` naming the flag and the path, like every refused command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class CliError(Exception):
    """A refused command line; the message names the flag and the value."""


def read_config(path: str, flag: str) -> dict[str, Any]:
    cfg_path = Path(path) / "config.json"
    if not Path(path).is_dir() or not cfg_path.is_file():
        raise CliError(f"{flag} {path!r}: not a directory with a config.json")
    try:
        data = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CliError(f"{flag} {path!r}: config.json is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CliError(f"{flag} {path!r}: config.json is not a JSON object")
    return data


def drafter_block_size_of(config: dict[str, Any], path: str) -> int | None:
    """The trained block size, read as sglang 0.5.23 reads it: ``dflash_config.block_size``,
    else a top-level ``block_size`` (speculative/dflash_utils.py parse_dflash_draft_config)."""
    dflash = config.get("dflash_config")
    raw = dflash.get("block_size") if isinstance(dflash, dict) and "block_size" in dflash else config.get("block_size")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise CliError(
            f"--speculative-draft-model-path {path!r}: DFLASH block_size={raw!r} in config.json must be an integer >= 1"
        )
    return raw
