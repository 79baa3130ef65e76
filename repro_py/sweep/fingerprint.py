"""Environment fingerprint of one config's measurement.

Two kinds of fields:

* known on the controller before anything runs (:data:`RESUME_KEYS`): the
  patch series hash, the engine lock hash, the engine kind, the host and the
  config's own hash. ``--resume`` compares these to decide whether a finished
  config still stands;
* known only after the restart: the systemd unit file hash (from the
  reconfigure report) and the engine version (from ``/server_info``). They are
  recorded with the result; a change shows in the report, it does not by
  itself trigger a rerun (the unit differs per config by design).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target

RESUME_KEYS: tuple[str, ...] = ("patch_series_sha256", "lock_sha256", "engine_kind", "host", "config_sha256")
ABSENT = "absent"
DEFAULT_SGLANG_VERSION = "0.5.23"


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def patch_series_sha256(bundle: Path, version: str) -> str:
    """Hash of ``patches/sglang/<version>/series`` and every patch it lists, in order."""
    series = bundle / "patches" / "sglang" / version / "series"
    if not series.is_file():
        return ABSENT
    digest = hashlib.sha256()
    text = series.read_bytes()
    digest.update(b"series\0" + text + b"\0")
    for line in text.decode("utf-8", "replace").splitlines():
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        patch = series.parent / name.split()[0]
        digest.update(name.encode() + b"\0")
        digest.update(patch.read_bytes() if patch.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def lock_path(bundle: Path, target: Target) -> Path | None:
    """The lock file that pins the engine host's Python environment."""
    explicit = target.var("sweep_lock_file")
    if isinstance(explicit, str) and explicit:
        path = Path(explicit)
        return path if path.is_absolute() else bundle / path
    reqs = bundle / "requirements"
    if target.simulated:
        candidate = reqs / "testhost.lock"
        return candidate if candidate.is_file() else None
    version = str(target.var("sglang_version") or DEFAULT_SGLANG_VERSION)
    matches = sorted(reqs.glob(f"sglang-{version}-*.lock"))
    return matches[0] if matches else None


def lock_sha256(bundle: Path, target: Target) -> str:
    path = lock_path(bundle, target)
    if path is None or not path.is_file():
        return ABSENT
    return _sha256_bytes(path.read_bytes())


def controller_fingerprint(bundle: Path, target: Target, cfg: PlannedConfig) -> dict[str, str]:
    """The part known before the restart (used by ``--resume``)."""
    version = str(target.var("sglang_version") or DEFAULT_SGLANG_VERSION)
    return {
        "patch_series_sha256": patch_series_sha256(bundle, version),
        "lock_sha256": lock_sha256(bundle, target),
        "engine_kind": target.engine_kind,
        "host": target.host,
        "config_sha256": cfg.config_sha256,
    }


def full_fingerprint(
    controller: Mapping[str, str], *, unit_sha256: str | None, sglang_version: str | None
) -> dict[str, str]:
    out = dict(controller)
    out["unit_sha256"] = unit_sha256 or ABSENT
    out["sglang_version"] = sglang_version or "unknown"
    return {key: out[key] for key in sorted(out)}


def matches(recorded: Mapping[str, Any] | None, current: Mapping[str, str]) -> tuple[bool, list[str]]:
    """Whether a recorded fingerprint still stands; the differing keys when not."""
    if not isinstance(recorded, Mapping):
        return False, ["(no fingerprint)"]
    differ = [key for key in RESUME_KEYS if recorded.get(key) != current.get(key)]
    return not differ, differ
