"""Load the coding-eval problems (``problems.yaml`` beside this module)."""

from __future__ import annotations

import builtins
import dataclasses
from pathlib import Path
from typing import Any

import yaml

PROBLEMS_PATH = Path(__file__).with_name("problems.yaml")
FIELDS = ("id", "prompt", "entry_point", "reference", "wrong_draft", "tests")


class ProblemsError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Problem:
    id: str
    prompt: str
    entry_point: str
    reference: str
    wrong_draft: str
    tests: str


def parse_problems(data: Any, *, origin: str = "problems") -> list[Problem]:
    if not isinstance(data, list) or not data:
        raise ProblemsError(f"{origin}: expected a non-empty list of problems")
    out: list[Problem] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ProblemsError(f"{origin}[{i}]: expected a mapping")
        missing = [f for f in FIELDS if not isinstance(item.get(f), str) or not item[f].strip()]
        if missing:
            raise ProblemsError(f"{origin}[{i}] ({item.get('id')!r}): missing or empty {', '.join(missing)}")
        entry = str(item["entry_point"])
        if not entry.isidentifier() or hasattr(builtins, entry) or entry.startswith("__"):
            raise ProblemsError(
                f"{origin}[{i}] ({item['id']!r}): entry_point {entry!r} must be an identifier that is not a "
                "builtin's name (the hidden tests see the real builtins, never a candidate's)"
            )
        if item["id"] in seen:
            raise ProblemsError(f"{origin}[{i}]: duplicate id {item['id']!r}")
        seen.add(item["id"])
        out.append(Problem(**{f: str(item[f]) for f in FIELDS}))
    return out


def load_problems(path: Path | None = None) -> list[Problem]:
    src = path or PROBLEMS_PATH
    with src.open(encoding="utf-8") as fh:
        return parse_problems(yaml.safe_load(fh), origin=str(src))
