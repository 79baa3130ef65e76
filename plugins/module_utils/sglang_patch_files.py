# os.path style, as the module that uses these is written (an Ansible module's stdlib-only helpers).
# ruff: noqa: PTH101, PTH103, PTH105, PTH108, PTH110, PTH112, PTH113, PTH117, PTH118, PTH119, PTH120, PTH123, PTH208
"""What sglang_patch_series reads and writes besides the series itself (stdlib only): checksums, atomic writes,
the installed package's site-packages, dist-info, version and RECORD, the files a diff touches, unified diffs."""

from __future__ import annotations

import base64
import difflib
import hashlib
import os
import re
import tempfile


class PatchSeriesError(Exception):
    """A refusal or failure, with the message the play shows."""


# ----------------------------------------------------------------------------
# Helpers


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha_or_none(data: bytes | None) -> str | None:
    return sha256_bytes(data) if data is not None else None


def sha256_file(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_bytes(path: str) -> bytes | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return f.read()


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def find_site_packages(venv_path: str, package: str) -> str:
    lib = os.path.join(venv_path, "lib")
    if not os.path.isdir(lib):
        raise PatchSeriesError(f"{venv_path} is not a virtual environment (no lib/ directory)")
    found = []
    for entry in sorted(os.listdir(lib)):
        sp = os.path.join(lib, entry, "site-packages")
        if entry.startswith("python") and os.path.isdir(sp) and find_dist_info(sp, package):
            found.append(sp)
    if not found:
        raise PatchSeriesError(
            f"{package} is not installed in {venv_path} (no {package}-*.dist-info in lib/python*/site-packages)"
        )
    if len(found) > 1:
        raise PatchSeriesError(f"{package} is installed in several site-packages of {venv_path}: {', '.join(found)}")
    return found[0]


def find_dist_info(site_packages: str, package: str) -> str | None:
    norm = re.sub(r"[-_.]+", "_", package).lower()
    hits = []
    for entry in os.listdir(site_packages):
        if not entry.endswith(".dist-info"):
            continue
        name = entry[: -len(".dist-info")].rsplit("-", 1)[0]
        if re.sub(r"[-_.]+", "_", name).lower() == norm:
            hits.append(os.path.join(site_packages, entry))
    if len(hits) > 1:
        raise PatchSeriesError(f"several {package} dist-info directories in {site_packages}: {', '.join(sorted(hits))}")
    return hits[0] if hits else None


def installed_version(dist_info: str) -> str:
    meta = read_bytes(os.path.join(dist_info, "METADATA"))
    if meta is None:
        raise PatchSeriesError(f"{dist_info} has no METADATA")
    for line in meta.decode("utf-8", "replace").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
        if not line.strip():
            break
    raise PatchSeriesError(f"{dist_info}/METADATA has no Version")


def read_record(dist_info: str) -> dict[str, str]:
    """RECORD path -> hex sha256 (as installed by pip)."""
    out: dict[str, str] = {}
    data = read_bytes(os.path.join(dist_info, "RECORD"))
    if data is None:
        return out
    for line in data.decode("utf-8", "replace").splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) != 3 or not parts[1].startswith("sha256="):
            continue
        digest = parts[1][len("sha256=") :]
        try:
            raw = base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4))
        except ValueError:
            continue
        out[parts[0]] = raw.hex()
    return out


_DIFF_PATH = re.compile(r"^(---|\+\+\+) (\S+)")


def touched_files(content: str, strip: int = 1) -> list[str]:
    """Site-packages relative paths a -p1 unified diff touches (old and new names)."""
    paths: list[str] = []
    for line in content.splitlines():
        m = _DIFF_PATH.match(line)
        if not m:
            continue
        raw = m.group(2)
        if raw == "/dev/null":
            continue
        parts = raw.split("/")
        if len(parts) <= strip:
            raise PatchSeriesError(f"cannot strip {strip} component(s) from '{raw}'")
        rel = os.path.normpath("/".join(parts[strip:]))
        if rel.startswith("..") or os.path.isabs(rel):
            raise PatchSeriesError(f"patch path '{raw}' leaves site-packages")
        if rel not in paths:
            paths.append(rel)
    return paths


def series_sha256(patches: list[dict[str, str]]) -> str:
    h = hashlib.sha256()
    for p in patches:
        h.update(p["name"].encode() + b"\0" + p["sha256"].encode() + b"\n")
    return h.hexdigest()


def unified(rel: str, before: bytes | None, after: bytes | None) -> str:
    a = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    b = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(
        difflib.unified_diff(
            a, b, "a/" + rel if before is not None else "/dev/null", "b/" + rel if after is not None else "/dev/null"
        )
    )
