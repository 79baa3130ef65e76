"""The proof's Python environment: the deployment's own lock and wheelhouse, offline.

``build`` creates a virtual environment the way roles/python_env installs the
host's (``pip install --require-hashes --no-deps --only-binary=:all: -r LOCK``
from ``--no-index --find-links WHEELHOUSE``, then any local wheels with
``--no-deps``), and reuses it while the lock and wheels are unchanged.
``patched_tree`` copies that environment's own sglang package (the cp312
wheel the wheelhouse carries) and applies the series to the copy, which the
servers then find first on PYTHONPATH: no cp311 wheel, no download.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import series

STAMP = ".ddtree-proof-env.sha256"


class EnvError(RuntimeError):
    pass


def _digest(lock: Path, wheels: list[Path]) -> str:
    h = hashlib.sha256(lock.read_bytes())
    for w in wheels:
        h.update(w.name.encode() + series.sha256_of(w).encode())
    return h.hexdigest()


def install_commands(venv: Path, lock: Path, wheelhouse: Path, wheels: list[Path]) -> list[list[str]]:
    pip = [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "--no-input"]
    offline = ["--no-index", "--find-links", str(wheelhouse)]
    cmds = [[*pip, "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", str(lock), *offline]]
    cmds += [[*pip, "--no-deps", *offline, str(w)] for w in wheels]
    return cmds


def build(python: str, venv: Path, lock: Path, wheelhouse: Path, wheels: list[Path]) -> tuple[Path, bool]:
    """(the environment's python, whether it was built now). Refuses a missing lock,
    wheelhouse or wheel, naming it."""
    for what, path in [("lock", lock), ("wheelhouse", wheelhouse), *(("wheel", w) for w in wheels)]:
        if not path.exists():
            raise EnvError(f"the {what} {path} does not exist")
    want = _digest(lock, wheels)
    stamp = venv / STAMP
    if stamp.exists() and stamp.read_text().strip() == want and (venv / "bin" / "python").exists():
        return venv / "bin" / "python", False
    if venv.exists():
        shutil.rmtree(venv)
    _run([python, "-m", "venv", str(venv)], "creating the environment")
    for cmd in install_commands(venv, lock, wheelhouse, wheels):
        _run(cmd, "installing offline")
    stamp.write_text(want + "\n")
    return venv / "bin" / "python", True


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvError(f"{what} failed ({' '.join(cmd)}):\n{(proc.stdout + proc.stderr)[-3000:]}")


def site_packages(python: Path | str) -> Path:
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout
    return Path(out.strip())


def patched_tree(python: Path | str, dest: Path) -> tuple[Path, str]:
    """A copy of `python`'s installed sglang (+ dist-info) with the series applied, and how:
    "applied" or "already patched" (a deployment venv the sglang_patches role patched)."""
    sp = site_packages(python)
    dist = sorted(sp.glob(f"sglang-{series.SGLANG_VERSION}.dist-info"))
    if not (sp / "sglang").is_dir() or not dist:
        raise EnvError(f"{python} has no sglang=={series.SGLANG_VERSION} in {sp}")

    def copy(to: Path) -> Path:
        if to.exists():
            shutil.rmtree(to)
        to.mkdir(parents=True)
        shutil.copytree(sp / "sglang", to / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(dist[0], to / dist[0].name)
        return to

    try:
        series.apply_series(copy(dest))
        return dest, "applied"
    except series.SeriesError as error:
        check = copy(dest.parent / (dest.name + "-reverse-check"))
        try:  # already patched in place (the deployment's sglang_patches role): reverse-applies cleanly
            series.apply_series(check, reverse=True)
        except series.SeriesError:
            raise EnvError(f"the series neither applies to nor is applied in {sp}/sglang: {error}") from None
        finally:
            shutil.rmtree(check, ignore_errors=True)
        return copy(dest), "already patched"
