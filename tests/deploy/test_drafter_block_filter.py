"""The drafter check of ``configure.yml``, ``ddtree.sglang.drafter_block_problems``, as Ansible loads and runs it.

The block size is read as sglang 0.5.23 reads the drafter's config.json (``dflash_config.block_size`` before a
top-level ``block_size``) and compared by the contract's rule; the test host's run of the whole role is
``tests/deploy/test_service_testhost.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

TRAINED_8_TOP_16 = json.dumps({"block_size": 16, "dflash_config": {"block_size": 8, "mask_token_id": 163838}})
CASES = [
    ({"algorithm": "ddtree", "block_size": 8}, TRAINED_8_TOP_16, False, []),
    ({"algorithm": "ddtree", "block_size": 16}, TRAINED_8_TOP_16, False,
     ["block_size=16 differs from the drafter's trained block size 8 (config.json); the drafter is out of "
      "distribution beyond its trained block. Set allow_block_mismatch=true to run it anyway"]),
    ({"algorithm": "ddtree", "block_size": 16}, TRAINED_8_TOP_16, True, []),
    ({"algorithm": "dflash", "block_size": 16}, json.dumps({"block_size": 16}), False, []),
    ({"algorithm": "dflash", "block_size": 8}, json.dumps({"dflash_config": {"block_size": "8"}}), False,
     ["dflash_config.block_size='8' in the drafter's config.json must be an integer >= 1"]),
    ({"algorithm": "ddtree", "block_size": 8}, "{not json", False, None),  # None: starts with this text
    ({"algorithm": "ddtree", "block_size": 8}, json.dumps({"block_size": 8}), "yes", None),
    ({"algorithm": "none", "block_size": None}, TRAINED_8_TOP_16, False, []),
]


def test_the_filter_reads_the_block_size_as_sglang_and_names_each_problem(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    out = tmp_path / "problems.json"
    cases = [{"spec": spec, "text": text, "allow": allow} for spec, text, allow, _ in CASES]
    res = run_playbook("tests/deploy/drafter_block.yml", "-e", json.dumps({"cases": cases, "out_file": str(out)}))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    got = json.loads(out.read_text())
    assert len(got) == len(CASES)
    for (spec, text, allow, want), problems in zip(CASES, got, strict=True):
        if want is not None:
            assert problems == want, (spec, text, allow, problems)
    assert got[5] and got[5][0].startswith("the drafter's config.json is not valid JSON"), got[5]
    assert got[6] and got[6][0].startswith("allow_block_mismatch='yes' is a str; a real boolean"), got[6]
