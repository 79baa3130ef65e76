"""SHA-256 manifests that GNU ``sha256sum -c`` accepts.

``python -m repro_py.manifest write|verify [DIR]``

* ``DIR`` given (a run directory such as ``results/<run-id>``): the manifest
  ``DIR/MANIFEST.sha256`` covers every regular file under ``DIR`` except the
  manifest itself and atomic-write temp files (``.*.tmp``).
* no ``DIR`` or ``.``: root mode. ``MANIFEST.sha256`` at the bundle root covers
  the bundle's own files, chosen by :data:`ROOT_INCLUDE` (files and folders
  that decide what the bundle deploys and measures); caches, virtual
  environments, results, tests and prose docs are not covered.

Format: one ``<sha256>  <relative path>`` line per file, sorted by path,
paths with ``/`` separators. A name containing a backslash or a newline is
written the way ``sha256sum`` writes it (a leading ``\\`` and escapes).

``verify`` reports missing, changed and unlisted files and exits non-zero
(``ExitCode.FAILURE``) when there is any.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from repro_py.atomicio import write_text_atomic
from repro_py.exitcodes import ExitCode

MANIFEST_NAME = "MANIFEST.sha256"

#: Root mode: what the bundle manifest covers (relative to the bundle root).
#: Folders are walked recursively; a missing entry is simply absent.
ROOT_INCLUDE: tuple[str, ...] = (
    "ansible.cfg",
    "site.yml",
    "galaxy.yml",
    "meta",
    "pyproject.toml",
    "roles",
    "playbooks",
    "plugins",
    "inventory",
    "patches",
    "repro_py",
    "requirements",
    "molecule",
    "testhost",
    "benchmarks",
    "scripts",
    "templates",
)

#: Never covered, anywhere (caches and build outputs).
EXCLUDE_DIRS = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".hypothesis",
        ".git",
        ".venv",
        ".wheelhouse",
        ".cache",
        "build",
        "dist",
    }
)
EXCLUDE_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".tmp", ".swp")

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def bundle_root() -> Path:
    """The bundle's root folder (the one holding ``repro_py/``)."""
    return Path(__file__).resolve().parent.parent


def _excluded(rel_parts: Sequence[str]) -> bool:
    for part in rel_parts:
        if part in EXCLUDE_DIRS or part.endswith(".egg-info"):
            return True
    name = rel_parts[-1]
    return name.endswith(EXCLUDE_SUFFIXES) or (name.startswith(".") and name.endswith(".tmp"))


def _walk(base: Path, start: Path) -> Iterable[str]:
    if start.is_symlink():
        return
    if start.is_file():
        rel = start.relative_to(base).as_posix()
        if not _excluded(rel.split("/")):
            yield rel
        return
    if not start.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDE_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(base).as_posix()
            if not _excluded(rel.split("/")):
                yield rel


def covered_files(directory: Path, *, root_mode: bool) -> list[str]:
    """Relative paths (sorted) that the manifest of ``directory`` covers."""
    if root_mode:
        found: set[str] = set()
        for entry in ROOT_INCLUDE:
            found.update(_walk(directory, directory / entry))
    else:
        found = set(_walk(directory, directory))
    found.discard(MANIFEST_NAME)
    return sorted(found)


def _escape(rel: str) -> tuple[str, bool]:
    if "\\" in rel or "\n" in rel or "\r" in rel:
        return rel.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r"), True
    return rel, False


def _unescape(rel: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(rel):
        ch = rel[i]
        if ch == "\\" and i + 1 < len(rel):
            nxt = rel[i + 1]
            out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def format_line(digest: str, rel: str) -> str:
    escaped, needs = _escape(rel)
    prefix = "\\" if needs else ""
    return f"{prefix}{digest}  {escaped}\n"


def parse_manifest(text: str) -> dict[str, str]:
    """``{relative path: sha256}``; raises ValueError naming a malformed line."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        escaped = line.startswith("\\")
        body = line[1:] if escaped else line
        digest, sep, rel = body.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
            raise ValueError(f"line {number} is not '<sha256>  <path>': {line!r}")
        entries[_unescape(rel) if escaped else rel] = digest.lower()
    return entries


def build(directory: Path, *, root_mode: bool) -> str:
    return "".join(
        format_line(sha256_file(directory / rel), rel) for rel in covered_files(directory, root_mode=root_mode)
    )


def write(directory: Path, *, root_mode: bool = False) -> Path:
    """Write ``directory/MANIFEST.sha256`` atomically and return its path."""
    target = directory / MANIFEST_NAME
    write_text_atomic(target, build(directory, root_mode=root_mode))
    return target


@dataclass
class VerifyReport:
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    checked: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.changed or self.unlisted)


def verify(directory: Path, *, root_mode: bool = False) -> VerifyReport:
    """Compare ``directory/MANIFEST.sha256`` with the files; raises FileNotFoundError without one."""
    entries = parse_manifest((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    report = VerifyReport()
    for rel, digest in sorted(entries.items()):
        path = directory / rel
        if not path.is_file():
            report.missing.append(rel)
            continue
        report.checked += 1
        if sha256_file(path) != digest:
            report.changed.append(rel)
    report.unlisted = [rel for rel in covered_files(directory, root_mode=root_mode) if rel not in entries]
    return report


def _is_root(arg: str | None) -> bool:
    return arg is None or arg in {".", "./"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m repro_py.manifest",
        description="Write or verify a MANIFEST.sha256 that `sha256sum -c` accepts.",
    )
    parser.add_argument("action", choices=("write", "verify"))
    parser.add_argument(
        "directory",
        nargs="?",
        default=None,
        help="a run directory (every file under it); omitted or '.': the bundle root (its own files)",
    )
    args = parser.parse_args(argv)
    root_mode = _is_root(args.directory)
    directory = bundle_root() if root_mode else Path(args.directory)
    if not directory.is_dir():
        print(f"manifest: {directory} is not a directory", file=sys.stderr)
        return ExitCode.USAGE
    if args.action == "write":
        target = write(directory, root_mode=root_mode)
        count = len(parse_manifest(target.read_text(encoding="utf-8")))
        print(f"manifest: wrote {target} ({count} files)")
        return ExitCode.OK
    try:
        report = verify(directory, root_mode=root_mode)
    except FileNotFoundError:
        print(f"manifest: {directory / MANIFEST_NAME} does not exist; run `write` first", file=sys.stderr)
        return ExitCode.FAILURE
    except ValueError as exc:
        print(f"manifest: {directory / MANIFEST_NAME}: {exc}", file=sys.stderr)
        return ExitCode.FAILURE
    for label, paths in (("MISSING", report.missing), ("CHANGED", report.changed), ("UNLISTED", report.unlisted)):
        for rel in paths:
            print(f"{label}: {rel}")
    if report.ok:
        print(f"manifest: {directory / MANIFEST_NAME} OK ({report.checked} files)")
        return ExitCode.OK
    print(
        f"manifest: {directory / MANIFEST_NAME} is stale: {len(report.missing)} missing, "
        f"{len(report.changed)} changed, {len(report.unlisted)} unlisted "
        f"(regenerate: python -m repro_py.manifest write{'' if root_mode else ' ' + str(directory)})",
        file=sys.stderr,
    )
    return ExitCode.FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
