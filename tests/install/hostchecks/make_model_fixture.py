#!/usr/bin/env python3
"""Lay down fixture model directories (safetensors shards with real headers, tiny tensors).

Usage: make_model_fixture.py ROOT
  ROOT/good     index + 2 whole shards + config.json
  ROOT/drafter  one model.safetensors, no index
  ROOT/broken   index naming 4 shards: one whole, one missing, one unreadable by
                anyone but root (mode 0600), one truncated
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path


def shard(path: Path, tensors: dict[str, int]) -> int:
    """Write a safetensors file of float32 tensors (name -> element count); returns data bytes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, count in tensors.items():
        header[name] = {"dtype": "F32", "shape": [count], "data_offsets": [offset, offset + 4 * count]}
        offset += 4 * count
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def model(directory: Path, shards: dict[str, dict[str, int]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o755)
    (directory / "config.json").write_text(json.dumps({"model_type": "fixture"}))
    weight_map = {t: name for name, tensors in shards.items() for t in tensors}
    total = sum(shard(directory / name, tensors) for name, tensors in shards.items())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))


def main(root: Path) -> int:
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    model(root / "good", {"model-00001-of-00002.safetensors": {"a": 64, "b": 32},
                          "model-00002-of-00002.safetensors": {"c": 128}})
    drafter = root / "drafter"
    drafter.mkdir(exist_ok=True)
    drafter.chmod(0o755)
    (drafter / "config.json").write_text(json.dumps({"block_size": 8}))
    shard(drafter / "model.safetensors", {"d": 16})
    broken = root / "broken"
    names = [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    model(broken, {n: {f"t{i}": 32} for i, n in enumerate(names)})
    (broken / names[1]).unlink()  # missing
    (broken / names[2]).chmod(0o600)  # unreadable by the service user
    data = (broken / names[3]).read_bytes()
    (broken / names[3]).write_bytes(data[: len(data) - 40])  # truncated download
    for path in root.rglob("*"):
        if path.is_file() and path.name != names[2]:
            path.chmod(0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
