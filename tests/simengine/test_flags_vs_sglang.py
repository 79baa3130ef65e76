"""Cross-check: the engine's argparse layer accepts and refuses what sglang 0.5.23's own parser does.

Needs a Python with sglang 0.5.23 importable (``.venv-sglang-cpu`` or
``$SGLANG_CPU_PYTHON``); skipped otherwise. Only flags both have are compared
(the DDTree patch flags and ``--sim-*`` are not in the stock wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from repro_py.simengine.flags import build_parser

REPO = Path(__file__).resolve().parents[2]
PYTHON = os.environ.get("SGLANG_CPU_PYTHON", str(REPO / ".venv-sglang-cpu" / "bin" / "python"))

CASES: list[list[str]] = [
    ["--model-path", "m", "--tp-size", "8", "--ep-size", "8", "--dp-size", "1"],
    ["--model", "m", "--tensor-parallel-size", "8", "--ep", "8"],
    ["--model-path", "m", "--mem-fraction-static", "0.85", "--attention-backend", "triton"],
    ["--model-path", "m", "--attention-backend", "no-such-backend"],
    ["--model-path", "m", "--cuda-graph-max-bs-decode", "64", "--disable-cuda-graph"],
    ["--model-path", "m", "--cuda-graph-max-bs", "64"],
    ["--model-path", "m", "--context-length", "32k", "--api-key", "k", "--enable-metrics"],
    ["--model-path", "m", "--reasoning-parser", "kimi_k2", "--trust-remote-code", "--served-model-name", "x"],
    ["--model-path", "m", "--reasoning-parser", "no-such-parser"],
    ["--model-path", "m", "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d",
     "--speculative-dflash-block-size", "8", "--speculative-draft-window-size", "2048"],
    ["--model-path", "m", "--speculative-draft-model", "d", "--speculative-num-draft-tokens", "8"],
    ["--model-path", "m", "--host", "0.0.0.0", "--port", "30001", "--skip-server-warmup"],
    ["--model-path", "m", "--port", "not-a-number"],
    ["--model-path", "m", "--no-such-flag"],
    ["--model-path", "m", "--max-running-requests", "64", "--decode-log-interval", "10"],
    ["--model-path", "m", "--tool-call-parser", "kimi_k2", "--cuda-graph-backend-decode", "disabled",
     "--cuda-graph-backend-prefill", "disabled"],
    ["--model-path", "m", "--tool-call-parser", "no-such-parser"],
    ["--model-path", "m", "--cuda-graph-backend-decode", "off"],
    ["--model-path", "m", "--enable-deterministic-inference", "--attention-backend", "triton"],
    ["--model-path", "m", "--enable-deterministic-inference", "yes"],
]  # fmt: skip

_PROBE = """
import argparse, json, sys, contextlib, io
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.loads(sys.argv[1]):
    p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            p.parse_args(argv)
        out.append(True)
    except SystemExit:
        out.append(False)
print(json.dumps(out))
"""


def _ours(argv: list[str]) -> bool:
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        return False
    return True


@pytest.mark.sglang_cpu
def test_argparse_layer_matches_sglang_0_5_23(capsys: pytest.CaptureFixture[str]) -> None:
    if not Path(PYTHON).exists():
        pytest.skip(f"no sglang 0.5.23 Python at {PYTHON}")
    proc = subprocess.run(
        [PYTHON, "-c", _PROBE, json.dumps(CASES)], capture_output=True, text=True, timeout=180, check=False
    )
    if proc.returncode != 0:
        pytest.skip(f"sglang not importable there: {proc.stderr[-300:]}")
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = [_ours(argv) for argv in CASES]
    capsys.readouterr()
    mismatches = [(argv, t, o) for argv, t, o in zip(CASES, theirs, ours, strict=True) if t != o]
    assert not mismatches
