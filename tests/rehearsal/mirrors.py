"""The local package mirrors REPRODUCE.md's rehearsal substitutes for the registries the containers cannot reach.

- a Python package index (PEP 503 "simple" pages, each file with its sha256) of the files
  the commands install: ``requirements/dev.lock`` for Python 3.12 (``make venv`` on an
  Ubuntu 24.04 controller; downloaded once with ``--require-hashes``, so the files are the
  lock's), the test-host wheelhouse (``.whl``: what ``scripts/build-wheelhouse.sh`` fetches),
  the Hugging Face CLI with its dependencies (``pipx install huggingface_hub==2.4.0``) and
  the build backend and pip itself; cached in ``.cache/rehearsal-mirror/``;
- NVIDIA's apt repository: a local signed one of dummy packages (tests/install/aptrepo);
- the Hugging Face Hub: tests/rehearsal/hf_mirror.py over SIMULATED model directories.

Each is served on the podman bridge's gateway address only (never beyond this machine).
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "rehearsal-mirror"
PLATFORM = [
    "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
    *(a for abi in ("cp312", "abi3", "none") for a in ("--abi", abi)),
    *(a for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
                    "manylinux1_x86_64", "any") for a in ("--platform", tag)),
]  # fmt: skip
#: what pipx and the project's build need besides the locks (pip itself, the build backend, the Hub CLI)
EXTRA = ["huggingface_hub==2.4.0", "pip", "setuptools>=69", "wheel"]


def _pip(*args: str) -> None:
    env = {**os.environ, "PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env, capture_output=True, text=True)


def files(wheelhouse: Path) -> Path:
    """The mirror's files (downloaded once into the cache; the wheelhouse's added each time)."""
    dev = CACHE / "dev-cp312"
    stamp = dev / ".lock-sha256"
    lock_sha = hashlib.sha256((ROOT / "requirements" / "dev.lock").read_bytes()).hexdigest()
    if not stamp.is_file() or stamp.read_text().strip() != lock_sha:
        shutil.rmtree(dev, ignore_errors=True)
        dev.mkdir(parents=True)
        _pip("download", "-q", "--no-deps", "--require-hashes", "-r", str(ROOT / "requirements" / "dev.lock"),
             *PLATFORM, "-d", str(dev))  # fmt: skip
        stamp.write_text(lock_sha + "\n")
    extra = CACHE / "extra-cp312"
    if not (extra / ".done").is_file():
        extra.mkdir(parents=True, exist_ok=True)
        _pip("download", "-q", *EXTRA, *PLATFORM, "-d", str(extra))
        (extra / ".done").write_text("\n".join(EXTRA) + "\n")
    out = CACHE / "files"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for source in (dev, extra, wheelhouse):
        for path in source.glob("*.whl"):
            if not (out / path.name).exists():
                shutil.copy(path, out / path.name)
    return out


def _project(wheel: str) -> str:
    return re.sub(r"[-_.]+", "-", wheel.split("-", maxsplit=1)[0]).lower()


def simple_index(file_dir: Path) -> Path:
    """PEP 503 pages for ``file_dir`` (``simple/<project>/index.html``, links ``../../files/<file>#sha256=``)."""
    simple = file_dir.parent / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    by_project: dict[str, list[Path]] = {}
    for path in sorted(file_dir.glob("*.whl")):
        by_project.setdefault(_project(path.name), []).append(path)
    for project, wheels in by_project.items():
        page = simple / project
        page.mkdir(parents=True)
        links = "".join(
            f'<a href="../../files/{html.escape(w.name)}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
            f"{html.escape(w.name)}</a><br>\n"
            for w in wheels
        )
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    (simple / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n"
        + "".join(f'<a href="{p}/">{p}</a><br>\n' for p in sorted(by_project))
        + "</body></html>\n"
    )
    return simple


class Served:
    """A background server bound to one address; stopped by :meth:`stop` (its own PID, nothing else)."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log.open("w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        found = re.search(r"(\d+)", line)
        if not found:
            self.stop()
            raise RuntimeError(f"{args[:3]} did not start: {line!r} (see {log})")
        self.port = int(found.group(1))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def serve_dir(directory: Path, address: str, log: Path) -> Served:
    """``directory`` over HTTP on ``address`` (a free port; the first line printed names it)."""
    code = (
        "import functools, http.server, sys\n"
        "handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[2])\n"
        "server = http.server.ThreadingHTTPServer((sys.argv[1], 0), handler)\n"
        "print('listening on', server.server_address[1], flush=True)\n"
        "server.serve_forever()\n"
    )
    return Served([sys.executable, "-c", code, address, str(directory)], log)
