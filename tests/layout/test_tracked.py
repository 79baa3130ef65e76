"""Every product file is one git tracks: an ignore rule never swallows a source file.

A ``results/`` rule meant for the runs' output directory once ignored ``repro_py/results/``'s new
modules, so a checkout had them and a clone did not. This takes the bundle's files as the manifest
covers them (``repro_py.manifest.covered_files``: MANIFEST.sha256 lists them, so a clone must have them)
and asks git which of them its ignore rules match.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from repro_py.manifest import MANIFEST_NAME, covered_files, parse_manifest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _ignored(paths: list[str]) -> list[str]:
    proc = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(paths), text=True,
                          capture_output=True, cwd=REPO_ROOT, check=False)
    assert proc.returncode in (0, 1), proc.stderr  # 1: nothing matched
    return proc.stdout.split()


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_no_product_file_is_ignored() -> None:
    files = covered_files(REPO_ROOT, root_mode=True)
    assert any(f.startswith("repro_py/results/") for f in files)
    assert _ignored(files) == []


def test_the_runs_directory_is_ignored_and_the_package_is_not() -> None:
    """The runs' output stays out of git; the package directory of the same name does not."""
    proc = subprocess.run(["git", "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", "-v",
                           "--stdin"], input="repro_py/results/schema.py\nresults/run-1/x.json\n", text=True,
                          capture_output=True, cwd=REPO_ROOT, check=False)
    matched = {line.split("\t")[-1] for line in proc.stdout.splitlines()}
    assert matched == {"results/run-1/x.json"}, proc.stdout


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_the_manifest_lists_only_files_a_clone_has() -> None:
    """A manifest written beside a transient file (a wheelhouse's temporary SHA256SUMS) lists a path no
    clone has, and every clone then fails ``sha256sum -c MANIFEST.sha256``: each listed path is tracked."""
    listed = set(parse_manifest((REPO_ROOT / MANIFEST_NAME).read_text()))
    proc = subprocess.run(["git", "ls-files", "-z", "--", *sorted(listed)], capture_output=True, cwd=REPO_ROOT,
                          check=True)
    tracked = set(proc.stdout.decode().split("\0")) - {""}
    assert len(listed) > 100
    untracked = sorted(listed - tracked)
    assert untracked == [], f"MANIFEST.sha256 lists untracked {untracked}: git add, or delete and make manifest"
