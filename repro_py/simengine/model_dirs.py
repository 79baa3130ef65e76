"""The model directories the engine is started with: their ``config.json``, read as sglang 0.5.23 reads it.

A refusal is a ``CliError`` naming the flag and the path, like every refused command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from repro_py import spec_config


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
    """The trained block size (``spec_config.drafter_block_size``: as sglang 0.5.23 reads it); a bad value is a
    CliError naming the flag and the path."""
    try:
        return spec_config.drafter_block_size(config)
    except spec_config.SpecConfigError as exc:
        raise CliError(f"--speculative-draft-model-path {path!r}: {exc}") from exc
