"""Helpers for the install-side tests: a fake site-packages with an installed sglang, small patches."""

from __future__ import annotations

import base64
import difflib
import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
MODULE_PATH = ROOT / "plugins" / "modules" / "sglang_patch_series.py"
#: the collection's checkout link (scripts/link-collection.sh): its module_utils import as ansible_collections.*
COLLECTIONS = ROOT / ".collections"
CHECK_LOCKS_PATH = ROOT / "scripts" / "check-locks.py"

PRISTINE = {
    "sglang/srt/speculative/dflash_info.py": "".join(f"line {i}\n" for i in range(1, 31)),
    "sglang/srt/layers/attention/triton_backend.py": (
        "class TritonAttnBackend:\n"
        "    def __init__(self, server_args):\n"
        "        self.num_draft_tokens = server_args.speculative_num_draft_tokens\n"
        "        self.max_context_len = server_args.context_length\n"
        "\n"
        "    def forward(self, q, k, v):\n"
        "        return q\n"
    ),
}


def load_path(name: str, path: Path) -> ModuleType:
    """Import a file as ``name``; the collection's module_utils resolve by their collection name (``.collections``
    is on the test path)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_site_packages(root: Path, version: str = "0.5.23") -> Path:
    """A venv-like tree: root/venv/lib/python3.11/site-packages with sglang VERSION."""
    sp = root / "venv" / "lib" / "python3.11" / "site-packages"
    record = []
    for rel, text in PRISTINE.items():
        path = sp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        record.append(f"{rel},{record_hash(text.encode())},{len(text.encode())}")
    dist = sp / f"sglang-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n\nbody\n")
    record.append(f"sglang-{version}.dist-info/METADATA,,")
    (dist / "RECORD").write_text("\n".join(record) + "\n")
    return sp


def make_patch(rel: str, before: str | None, after: str | None) -> str:
    a = (before or "").splitlines(keepends=True)
    b = (after or "").splitlines(keepends=True)
    old = f"a/{rel}" if before is not None else "/dev/null"
    new = f"b/{rel}" if after is not None else "/dev/null"
    return f"diff -u {old} {new}\n" + "".join(difflib.unified_diff(a, b, old, new))
