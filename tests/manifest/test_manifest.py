from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repro_py import manifest
from repro_py.exitcodes import ExitCode

SHA256SUM = shutil.which("sha256sum")
needs_sha256sum = pytest.mark.skipif(SHA256SUM is None, reason="GNU sha256sum is not installed")


def _tree(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "a.json").write_text('{"a": 1}\n')
    (root / "plots").mkdir()
    (root / "plots" / "p.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (root / "summary.md").write_text("# report\n")
    (root / "name with spaces.txt").write_text("spaces\n")
    (root / "configs" / ".a.json.123.tmp").write_text("half a write")  # never covered
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    return root


def sha256sum_check(directory: Path) -> subprocess.CompletedProcess[str]:
    assert SHA256SUM is not None
    return subprocess.run(
        [SHA256SUM, "-c", "--strict", manifest.MANIFEST_NAME], cwd=directory, capture_output=True, text=True,
        check=False,
    )  # fmt: skip


def test_write_format_is_sorted_and_excludes_itself_and_temp_files(tmp_path: Path) -> None:
    run = _tree(tmp_path / "run")
    path = manifest.write(run)
    lines = path.read_text().splitlines()
    names = [line.split("  ", 1)[1] for line in lines]
    assert names == sorted(names)
    assert names == ["configs/a.json", "name with spaces.txt", "plots/p.png", "summary.md"]
    assert all(len(line.split("  ", 1)[0]) == 64 for line in lines)
    assert manifest.verify(run).ok


@needs_sha256sum
def test_gnu_sha256sum_accepts_it_and_agrees_on_changes(tmp_path: Path) -> None:
    run = _tree(tmp_path / "run")
    manifest.write(run)
    assert sha256sum_check(run).returncode == 0
    (run / "summary.md").write_text("# tampered\n")
    assert sha256sum_check(run).returncode != 0
    report = manifest.verify(run)
    assert report.changed == ["summary.md"] and not report.ok


@needs_sha256sum
def test_odd_file_names_round_trip_through_sha256sum(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "back\\slash.txt").write_text("b\n")
    (run / "new\nline.txt").write_text("n\n")
    manifest.write(run)
    text = (run / manifest.MANIFEST_NAME).read_text()
    assert sum(1 for line in text.splitlines() if line.startswith("\\")) == 2  # escaped, as sha256sum writes
    assert manifest.parse_manifest(text).keys() == {"back\\slash.txt", "new\nline.txt"}
    assert sha256sum_check(run).returncode == 0
    assert manifest.verify(run).ok


def test_verify_reports_missing_changed_unlisted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _tree(tmp_path / "run")
    manifest.write(run)
    (run / "configs" / "a.json").unlink()
    (run / "plots" / "p.png").write_bytes(b"other")
    (run / "extra.txt").write_text("new\n")
    assert manifest.main(["verify", str(run)]) == ExitCode.FAILURE
    out = capsys.readouterr()
    assert "MISSING: configs/a.json" in out.out
    assert "CHANGED: plots/p.png" in out.out
    assert "UNLISTED: extra.txt" in out.out
    assert "stale" in out.err
    assert manifest.main(["write", str(run)]) == ExitCode.OK
    assert manifest.main(["verify", str(run)]) == ExitCode.OK


def test_verify_without_a_manifest_or_with_a_bad_line(tmp_path: Path) -> None:
    run = _tree(tmp_path / "run")
    assert manifest.main(["verify", str(run)]) == ExitCode.FAILURE
    (run / manifest.MANIFEST_NAME).write_text("not a manifest line\n")
    assert manifest.main(["verify", str(run)]) == ExitCode.FAILURE
    assert manifest.main(["verify", str(tmp_path / "absent")]) == ExitCode.USAGE


def test_root_mode_covers_the_bundle_files_only() -> None:
    root = manifest.bundle_root()
    files = manifest.covered_files(root, root_mode=True)
    assert "repro_py/manifest.py" in files
    assert "pyproject.toml" in files
    assert any(f.startswith("templates/report/") for f in files)
    assert not any(f.startswith(("tests/", "results/", ".venv", "docs/")) for f in files)
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    assert manifest.MANIFEST_NAME not in files


def test_root_manifest_is_current() -> None:
    """CI: the bundle's MANIFEST.sha256 must match the files (regenerate with `python -m repro_py.manifest write`)."""
    root = manifest.bundle_root()
    if not (root / manifest.MANIFEST_NAME).is_file():
        pytest.skip("no MANIFEST.sha256 at the bundle root yet")
    report = manifest.verify(root, root_mode=True)
    assert report.ok, (
        f"stale MANIFEST.sha256: missing={report.missing} changed={report.changed} unlisted={report.unlisted}"
    )
