#!/usr/bin/env python3
"""Check the hash-locked requirements files (CI and by hand).

Two checks:

1. Consistency (always; no network): every CUDA toolkit component in a lock
   belongs to ONE toolkit release. The reference is the `cuda-toolkit`
   meta-package: a lock that pins `cuda-toolkit==X` must pin each component
   to the version that X pins, and every component whose version follows the
   toolkit's own numbering (nvcc, crt, nvvm, runtime, cccl, nvrtc, ...) must
   be on the expected major.minor (13.0). A torch build with a local CUDA tag
   (`+cu129`) must match too. Every requirement must be `==` pinned with at
   least one hash.
2. Resolution (unless --offline): re-run scripts/compile-locks.sh into a
   temporary directory against the real registry and compare the pins (and
   that the committed hashes are still offered) with the committed lock.

Usage:
    scripts/check-locks.py [--offline] [--toolkit 13.0.3.0] [LOCK ...]
With no LOCK: the production, CUDA wheel and test-host locks in requirements/.
Exit status: 0 ok, 1 a check failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQ = ROOT / "requirements"

# Lock file name -> scripts/compile-locks.sh target.
COMPILE_TARGETS = {
    "sglang-0.5.23-cu130.lock": "production",
    "testhost.lock": "testhost",
    "cuda-13.0.3-wheels.lock": "cuda",
}
DEFAULT_LOCKS = tuple(REQ / name for name in COMPILE_TARGETS)

# What each cuda-toolkit meta-package release pins (Linux x86_64), read off its
# wheel metadata (Requires-Dist `==X.*` of every extra). A release that is not
# in this table cannot be checked offline: add it here when moving the toolkit.
TOOLKIT_PINS: dict[str, dict[str, str]] = {
    "13.0.3.0": {
        "nvidia-cublas": "13.1.1.3",
        "nvidia-cuda-cccl": "13.0.85",
        "nvidia-cuda-crt": "13.0.88",
        "nvidia-cuda-culibos": "13.0.85",
        "nvidia-cuda-cupti": "13.0.85",
        "nvidia-cuda-cuxxfilt": "13.0.85",
        "nvidia-cuda-nvcc": "13.0.88",
        "nvidia-cuda-nvrtc": "13.0.88",
        "nvidia-cuda-opencl": "13.0.85",
        "nvidia-cuda-profiler-api": "13.0.85",
        "nvidia-cuda-runtime": "13.0.96",
        "nvidia-cuda-sanitizer-api": "13.0.85",
        "nvidia-cufft": "12.0.0.61",
        "nvidia-cufile": "1.15.1.6",
        "nvidia-curand": "10.4.0.35",
        "nvidia-cusolver": "12.0.4.66",
        "nvidia-cusparse": "12.6.3.3",
        "nvidia-npp": "13.0.1.2",
        "nvidia-nvfatbin": "13.0.85",
        "nvidia-nvjpeg": "13.0.1.86",
        "nvidia-nvml-dev": "13.0.87",
        "nvidia-nvptxcompiler": "13.0.88",
        "nvidia-nvtx": "13.0.85",
        "nvidia-nvvm": "13.0.88",
    },
}
# Components versioned like the toolkit itself (13.0.x): besides the table,
# any package with one of these names or prefixes must be on the toolkit's
# major.minor. nvJitLink is only `>=13.0.88,<14` in the meta-package; it is
# held to 13.0 here so that nothing in the environment is newer than nvcc.
TOOLKIT_NUMBERED = (
    "nvidia-cuda-",
    "nvidia-nvvm",
    "nvidia-nvjitlink",
    "nvidia-nvtx",
    "nvidia-nvfatbin",
    "nvidia-nvptxcompiler",
    "nvidia-nvml-dev",
)
# nvcc cannot compile unless these agree; all must be present with nvcc.
COMPILER_SET = ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-cccl")

_REQ_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(==|===|>=|<=|~=|!=|>|<)?\s*([^\s\\;]*)")
_HASH = re.compile(r"--hash=(sha256):([0-9a-f]{64})")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Pin:
    name: str
    version: str
    operator: str
    hashes: set[str] = field(default_factory=set)
    line: int = 0


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, msg: str) -> None:
        self.errors.append(msg)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)


def parse_lock(text: str) -> dict[str, Pin]:
    """Parse a pip requirements file with `\\` continuations and --hash options."""
    pins: dict[str, Pin] = {}
    logical: list[tuple[int, str]] = []
    buf = ""
    start = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if not buf:
            start = lineno
        stripped = line.strip()
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        if buf.strip():
            logical.append((start, buf.strip()))
        buf = ""
    if buf.strip():
        logical.append((start, buf.strip()))
    for lineno, entry in logical:
        if entry.startswith("-"):
            continue  # global options (--index-url, ...)
        m = _REQ_LINE.match(entry)
        if not m:
            continue
        name = canonical(m.group(1))
        pins[name] = Pin(
            name=name,
            version=m.group(4) or "",
            operator=m.group(3) or "",
            hashes={f"{a}:{h}" for a, h in _HASH.findall(entry)},
            line=lineno,
        )
    return pins


def _major_minor(version: str) -> str:
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def check_consistency(pins: dict[str, Pin], lock_name: str, toolkit: str, report: Report) -> None:
    for pin in pins.values():
        if pin.operator not in ("==", "==="):
            report.error(f"{lock_name}:{pin.line}: {pin.name} is not pinned with == ({pin.operator or 'no'} specifier)")
        if not pin.hashes:
            report.error(f"{lock_name}:{pin.line}: {pin.name}=={pin.version} has no --hash")

    if toolkit not in TOOLKIT_PINS:
        known = ", ".join(TOOLKIT_PINS)
        report.error(f"toolkit {toolkit} is not in check-locks.py's TOOLKIT_PINS table (known: {known})")
        return
    table = TOOLKIT_PINS[toolkit]
    want_mm = _major_minor(toolkit)

    meta = pins.get("cuda-toolkit")
    if meta is not None and meta.version != toolkit:
        report.error(f"{lock_name}: cuda-toolkit=={meta.version}, expected the pinned toolkit {toolkit}")
    for name, pin in sorted(pins.items()):
        if name in table and pin.version != table[name]:
            report.error(
                f"{lock_name}: {name}=={pin.version} does not belong to CUDA toolkit {toolkit} "
                f"(cuda-toolkit {toolkit} pins {name}=={table[name]})"
            )
        elif name.startswith(TOOLKIT_NUMBERED) and _major_minor(pin.version) != want_mm:
            report.error(
                f"{lock_name}: {name}=={pin.version} is not a CUDA {want_mm} component "
                f"(toolkit {toolkit}: every toolkit-numbered component must be {want_mm}.x)"
            )
        if name.endswith("-cu12"):
            report.warn(f"{lock_name}: {name}=={pin.version} is a CUDA 12 build next to CUDA {want_mm}")
        if name in ("torch", "torchvision", "torchaudio") and "+" in pin.version:
            local = pin.version.split("+", 1)[1]
            want_tag = "cu" + want_mm.replace(".", "")
            if local.startswith("cu") and local != want_tag:
                report.error(f"{lock_name}: {name}=={pin.version} is a {local} build, expected {want_tag}")

    if "nvidia-cuda-nvcc" in pins:
        missing = [n for n in COMPILER_SET if n not in pins]
        if missing:
            report.error(
                f"{lock_name}: nvcc is locked but {', '.join(missing)} is not: unpinned compiler parts float "
                f"(pin cuda-toolkit[nvcc,cudart,cccl]=={toolkit})"
            )
        versions = {n: pins[n].version for n in COMPILER_SET if n in pins}
        if len({_major_minor(v) for v in versions.values()}) > 1:
            listed = ", ".join(f"{n}=={v}" for n, v in versions.items())
            report.error(f"{lock_name}: the CUDA compiler parts disagree on the toolkit release: {listed}")


def check_resolution(locks: Sequence[Path], report: Report, compile_script: Path) -> None:
    """Re-resolve each lock into a temporary directory and compare."""
    with tempfile.TemporaryDirectory(prefix="check-locks-") as tmp:
        for lock in locks:
            target = COMPILE_TARGETS.get(lock.name)
            if target is None:
                report.warn(f"{lock.name}: no compile target known; resolution not checked")
                continue
            proc = subprocess.run([str(compile_script), target, "-o", tmp], capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                report.error(f"{lock.name}: no longer resolves against the registry:\n{proc.stderr.strip()}")
                continue
            committed = parse_lock(lock.read_text())
            fresh = parse_lock((Path(tmp) / lock.name).read_text())
            compare_pins(lock.name, committed, fresh, report)


def compare_pins(lock_name: str, committed: dict[str, Pin], fresh: dict[str, Pin], report: Report) -> None:
    for name in sorted(set(committed) | set(fresh)):
        old, new = committed.get(name), fresh.get(name)
        if old is None and new is not None:
            report.error(f"{lock_name}: re-resolving adds {name}=={new.version}")
        elif new is None and old is not None:
            report.error(f"{lock_name}: re-resolving drops {name}=={old.version}")
        elif old is not None and new is not None:
            if old.version != new.version:
                report.error(f"{lock_name}: {name} is locked at {old.version}, re-resolves to {new.version}")
            elif old.hashes - new.hashes:
                gone = ", ".join(sorted(old.hashes - new.hashes))
                report.error(f"{lock_name}: {name}=={old.version}: the registry no longer offers {gone}")
            elif new.hashes - old.hashes:
                report.warn(f"{lock_name}: {name}=={old.version} has {len(new.hashes - old.hashes)} new file(s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("locks", nargs="*", type=Path, help="lock files (default: the committed locks)")
    parser.add_argument("--offline", action="store_true", help="consistency only; do not re-resolve")
    parser.add_argument("--toolkit", default="13.0.3.0", help="the cuda-toolkit release all CUDA parts must match")
    parser.add_argument(
        "--compile-script", type=Path, default=ROOT / "scripts" / "compile-locks.sh", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    locks: list[Path] = list(args.locks) or list(DEFAULT_LOCKS)

    report = Report()
    for lock in locks:
        if not lock.is_file():
            report.error(f"{lock}: no such lock file")
            continue
        pins = parse_lock(lock.read_text())
        if not pins:
            report.error(f"{lock.name}: no requirements found")
        check_consistency(pins, lock.name, args.toolkit, report)
    if not args.offline and not report.errors:
        check_resolution([lk for lk in locks if lk.is_file()], report, args.compile_script)

    for msg in report.warnings:
        print(f"check-locks: warning: {msg}", file=sys.stderr)
    for msg in report.errors:
        print(f"check-locks: FAIL: {msg}", file=sys.stderr)
    if report.errors:
        return 1
    mode = "consistency" if args.offline else "consistency + resolution"
    print(f"check-locks: ok ({mode}; {len(locks)} lock(s); toolkit {args.toolkit})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
