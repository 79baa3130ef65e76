"""Atomic writes leave the old file or the new one, never a torn or stray file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro_py import atomicio


def test_write_json_atomic_round_trips_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "result.json"
    atomicio.write_json_atomic(target, {"b": 2, "a": 1})
    assert json.loads(target.read_text()) == {"a": 1, "b": 2}
    assert sorted(p.name for p in target.parent.iterdir()) == ["result.json"]


def test_failed_write_keeps_the_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "result.json"
    atomicio.write_text_atomic(target, "old\n")

    def boom(self: Path, other: Path) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomicio.write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
