#!/usr/bin/env python3
"""Fetch, unpack, patch and regenerate the DDTree patch series for sglang.

Stdlib only (runs in any Python >= 3.11). Subcommands:

  fetch       download the pinned sglang wheel into the cache (sha256 checked)
  unpack      unpack the pristine package tree (the wheel's contents) to DIR
  apply       unpack + apply the series in order with `patch -p1` into DIR
  check       apply, reverse-apply, and byte-compile every patched file
  workspace   build a scratch git repo in DIR: pristine commit (tag
              `pristine`) + one commit per patch, the header as its message
  regen       write numbered patches + `series` from a workspace's commits
              pristine..HEAD (headers = commit messages)

Editing a patch: `workspace DIR`, edit in DIR (amend / fixup / rebase -i,
one commit per patch), then `regen DIR`. See patches/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

SGLANG_VERSION = "0.5.23"
WHEEL_NAME = f"sglang-{SGLANG_VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"

REPO_ROOT = Path(__file__).resolve().parents[2]
SERIES_DIR = REPO_ROOT / "patches" / "sglang" / SGLANG_VERSION
CACHE_DIR = REPO_ROOT / ".cache" / "sglang-wheel"

GIT_ID = ["-c", "user.name=ddtree-series", "-c", "user.email=ddtree-series@localhost"]
GIT_PLAIN = ["-c", "color.ui=never", "-c", "diff.noprefix=false", "-c", "core.quotepath=off"]
# Header lines that patch(1) could take for diff syntax.
_UNSAFE_HEADER = re.compile(r"^(--- |\+\+\+ |\*\*\* |@@|diff |Index:)")


class SeriesError(RuntimeError):
    pass


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(cache_dir: Path = CACHE_DIR, python: str | None = None) -> Path:
    """The pinned wheel from the cache, downloading it with pip if absent."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / WHEEL_NAME
    if not wheel.exists():
        cmd = [
            python or sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            f"sglang=={SGLANG_VERSION}",
            "-d",
            str(cache_dir),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not wheel.exists():
            raise SeriesError(
                f"could not download sglang=={SGLANG_VERSION} into {cache_dir}:\n"
                + proc.stdout[-2000:]
                + proc.stderr[-2000:]
            )
    digest = sha256_of(wheel)
    if digest != WHEEL_SHA256:
        raise SeriesError(f"{wheel}: sha256 {digest} != pinned {WHEEL_SHA256}; delete it and fetch again")
    return wheel


def unpack(dest: Path, wheel: Path | None = None, only: list[str] | None = None) -> Path:
    """Unpack the pristine package tree (sglang/ + dist-info) into dest.

    `only` limits it to those paths plus the dist-info (enough for patch(1),
    which reads nothing but the files a patch names; used to keep checks fast).
    """
    wheel = wheel or fetch_wheel()
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SeriesError(f"{dest} is not empty")
    with zipfile.ZipFile(wheel) as zf:
        if only is None:
            zf.extractall(dest)
        else:
            wanted = set(only)
            names = [n for n in zf.namelist() if n in wanted or ".dist-info/" in n]
            zf.extractall(dest, members=names)
    return dest


def series_files(series_dir: Path = SERIES_DIR) -> list[str]:
    """Every path the series creates or modifies."""
    return sorted({f for p in read_series(series_dir) for f in touched_files(p)})


def read_series(series_dir: Path = SERIES_DIR) -> list[Path]:
    names = [
        line.strip()
        for line in (series_dir / "series").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    paths = [series_dir / n for n in names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SeriesError(f"series names missing files: {missing}")
    return paths


def patch_header(patch: Path) -> str:
    """The header: everything before the first `diff --git` line."""
    lines = []
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git "):
            break
        lines.append(line)
    return "\n".join(lines).strip() + "\n"


def touched_files(patch: Path) -> list[str]:
    """Paths (relative to the tree root) a patch creates or modifies."""
    out = []
    for line in patch.read_text().splitlines():
        if line.startswith("+++ b/"):
            out.append(line[len("+++ b/") :].strip())
    return out


def _run_patch(tree: Path, patch: Path, reverse: bool, dry_run: bool) -> subprocess.CompletedProcess:
    cmd = ["patch", "-p1", "--batch", "--no-backup-if-mismatch", "-d", str(tree), "-i", str(patch)]
    cmd.append("--reverse" if reverse else "--forward")
    if dry_run:
        cmd.append("--dry-run")
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def apply_series(tree: Path, series_dir: Path = SERIES_DIR, reverse: bool = False) -> list[Path]:
    """Apply (or reverse-apply, last patch first) the series. Each patch must
    apply cleanly: a failed hunk, fuzz or an offset is an error."""
    patches = read_series(series_dir)
    order = list(reversed(patches)) if reverse else patches
    for p in order:
        proc = _run_patch(tree, p, reverse, dry_run=False)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0 or re.search(r"(fuzz|offset|FAILED|reject)", text, re.IGNORECASE):
            raise SeriesError(
                f"{'reverse-' if reverse else ''}applying {p.name} failed (rc={proc.returncode}):\n{text}"
            )
    return patches


def byte_compile(tree: Path, rel_paths: list[str]) -> None:
    """Compile every patched .py file to bytecode in memory (no .pyc written)."""
    for rel in rel_paths:
        if rel.endswith(".py"):
            path = tree / rel
            compile(path.read_bytes(), str(path), "exec", dont_inherit=True)


def patched_tree(dest: Path, series_dir: Path = SERIES_DIR) -> Path:
    unpack(dest)
    apply_series(dest, series_dir)
    return dest


@contextlib.contextmanager
def given_or_temporary_tree(given: Path | None, prefix: str = "ddtree-") -> Iterator[Path]:
    """`given` (a patched package tree) as is, or a temporary patched tree removed on exit."""
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield patched_tree(Path(tmp) / "tree")


def check(series_dir: Path = SERIES_DIR) -> dict:
    """Apply in order, byte-compile every touched file, reverse-apply, and
    compare with pristine. Returns a summary."""
    only = series_files(series_dir)
    with tempfile.TemporaryDirectory(prefix="ddtree-series-") as tmp:
        tree = Path(tmp) / "tree"
        pristine = Path(tmp) / "pristine"
        unpack(tree, only=only)
        unpack(pristine, only=only)
        patches = apply_series(tree, series_dir)
        files = sorted({f for p in patches for f in touched_files(p)})
        byte_compile(tree, files)
        apply_series(tree, series_dir, reverse=True)
        for rel in files:
            a, b = tree / rel, pristine / rel
            if b.exists():
                if a.read_bytes() != b.read_bytes():
                    raise SeriesError(f"reverse-apply did not restore {rel}")
            elif a.exists() and a.stat().st_size:
                raise SeriesError(f"reverse-apply left new file {rel}")
        return {"patches": [p.name for p in patches], "files": files}


def _git(repo: Path, *args: str, capture: bool = True) -> str:
    proc = subprocess.run(
        ["git", *GIT_PLAIN, *GIT_ID, "-C", str(repo), *args],
        capture_output=capture,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SeriesError(f"git {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def make_workspace(dest: Path, series_dir: Path = SERIES_DIR, only_touched: bool = False) -> Path:
    """Scratch git repo: pristine commit tagged `pristine`, then one commit per
    patch. `only_touched` unpacks just the files the series touches (the diffs
    are the same; a full tree is the one to edit and test in)."""
    unpack(dest, only=series_files(series_dir) if only_touched else None)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", f"pristine sglang {SGLANG_VERSION}")
    _git(dest, "tag", "pristine")
    for p in read_series(series_dir):
        proc = _run_patch(dest, p, reverse=False, dry_run=False)
        if proc.returncode != 0:
            raise SeriesError(f"applying {p.name} failed:\n{proc.stdout}{proc.stderr}")
        _git(dest, "add", "-A")
        msg = Path(dest / ".git" / "DDTREE_MSG")
        msg.write_text(patch_header(p))
        _git(dest, "commit", "-q", "-F", str(msg))
        msg.unlink()
    return dest


def _slug(subject: str) -> str:
    subject = re.sub(r"^ddtree:\s*", "", subject.strip())
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(slug) > 48:  # cut at a word boundary
        slug = slug[:49].rsplit("-", 1)[0]
    return slug


def regen(workspace: Path, series_dir: Path = SERIES_DIR) -> list[str]:
    """Write NNNN-<slug>.patch + series from workspace commits pristine..HEAD."""
    commits = _git(workspace, "rev-list", "--reverse", "pristine..HEAD").split()
    if not commits:
        raise SeriesError("no commits after tag `pristine` in the workspace")
    series_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for i, c in enumerate(commits, start=1):
        message = _git(workspace, "log", "-1", "--format=%B", c).strip() + "\n"
        bad = [line for line in message.splitlines() if _UNSAFE_HEADER.match(line)]
        if bad:
            raise SeriesError(f"commit {c[:12]}: header lines patch(1) could misread: {bad}")
        diff = _git(
            workspace,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            "-U3",
            f"{c}^",
            c,
        )
        if not diff.strip():
            raise SeriesError(f"commit {c[:12]} is empty")
        name = f"{i:04d}-{_slug(message.splitlines()[0])}.patch"
        (series_dir / name).write_text(message + "\n" + diff)
        names.append(name)
    for old in series_dir.glob("*.patch"):
        if old.name not in names:
            old.unlink()
    (series_dir / "series").write_text(
        f"# DDTree for sglang=={SGLANG_VERSION}: apply in order with `patch -p1` at the\n"
        "# root of the pristine package tree (the wheel's contents). Generated by\n"
        "# patches/tools/series.py regen; do not edit by hand.\n" + "".join(n + "\n" for n in names)
    )
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series-dir", type=Path, default=SERIES_DIR)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    for name in ("unpack", "apply", "workspace", "regen"):
        sp = sub.add_parser(name)
        sp.add_argument("dir", type=Path)
    sub.add_parser("check")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(fetch_wheel())
        elif args.cmd == "unpack":
            print(unpack(args.dir))
        elif args.cmd == "apply":
            print(patched_tree(args.dir, args.series_dir))
        elif args.cmd == "check":
            summary = check(args.series_dir)
            print(f"ok: {len(summary['patches'])} patches, {len(summary['files'])} files")
        elif args.cmd == "workspace":
            print(make_workspace(args.dir, args.series_dir))
        elif args.cmd == "regen":
            for n in regen(args.dir, args.series_dir):
                print(n)
    except SeriesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
