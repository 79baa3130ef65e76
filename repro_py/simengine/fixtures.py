"""Lay down SIMULATED model directories (target + drafter config.json) for the engine.

``python -m repro_py.simengine.fixtures DIR [--drafter-block-size 8]`` writes
``DIR/target/config.json`` and ``DIR/drafter/config.json`` and prints their
paths as JSON. The files hold no weights; each says it is simulated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from repro_py.atomicio import write_text_atomic
from repro_py.exitcodes import ExitCode

SIM_NOTE = "SIMULATED model directory for repro_py.simengine; it holds no weights"


def write_model_dirs(root: str | Path, *, drafter_block_size: int = 8, context_length: int = 262144) -> dict[str, str]:
    """Write the target and drafter directories under ``root``; return their paths."""
    root = Path(root)
    target = root / "target"
    drafter = root / "drafter"
    target.mkdir(parents=True, exist_ok=True)
    drafter.mkdir(parents=True, exist_ok=True)
    target_cfg = {
        "_simulated": True,
        "_note": SIM_NOTE,
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "max_position_embeddings": context_length,
        "vocab_size": 163840,
        "num_hidden_layers": 61,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
    }
    drafter_cfg = {
        "_simulated": True,
        "_note": SIM_NOTE,
        "architectures": ["DFlashDraftModel"],
        "num_hidden_layers": 6,
        "block_size": drafter_block_size,
        "sliding_window": 2048,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "dflash_config": {
            "block_size": drafter_block_size,
            "target_layer_ids": [1, 15, 29, 43, 57],
            "mask_token_id": 163838,
        },
    }
    # Atomic: engines sharing a root read these files while a later engine's start rewrites them.
    write_text_atomic(target / "config.json", json.dumps(target_cfg, indent=2) + "\n")
    write_text_atomic(drafter / "config.json", json.dumps(drafter_cfg, indent=2) + "\n")
    return {"model_path": str(target), "draft_model_path": str(drafter)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro_py.simengine.fixtures", description=__doc__)
    parser.add_argument("dir", help="where to write target/ and drafter/")
    parser.add_argument("--drafter-block-size", type=int, default=8)
    parser.add_argument("--context-length", type=int, default=262144)
    ns = parser.parse_args(argv)
    if ns.drafter_block_size < 1:
        print(f"error: --drafter-block-size {ns.drafter_block_size}: must be >= 1", file=sys.stderr)
        return ExitCode.USAGE
    paths = write_model_dirs(ns.dir, drafter_block_size=ns.drafter_block_size, context_length=ns.context_length)
    print(json.dumps(paths))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
