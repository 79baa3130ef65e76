"""Atomic writes leave the old file or the new one, never a torn or stray file."""

from __future__ import annotations

import json
import os
import stat
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


def test_a_new_file_gets_the_mode_a_plain_write_would_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    # The simulated model directories are laid down by root on the test host and read by the service user: a
    # 0600 config.json (tempfile.mkstemp's mode) stopped the engine with "Permission denied".
    old = os.umask(0o022)
    try:
        fresh = tmp_path / "config.json"
        atomicio.write_text_atomic(fresh, "{}\n")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        os.umask(0o077)
        atomicio.write_text_atomic(fresh, "{}\n")  # an existing file keeps its mode whatever the umask
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
        kept = tmp_path / "private.json"
        kept.write_text("old\n")
        kept.chmod(0o640)
        os.umask(0o022)
        atomicio.write_text_atomic(kept, "new\n")
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "private.json"]
    finally:
        os.umask(old)
