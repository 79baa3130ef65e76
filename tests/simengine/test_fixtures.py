"""The SIMULATED model directories: rewriting them never shows a reader half a config.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from repro_py.simengine.fixtures import write_model_dirs

_READER = """
import json, os, sys
path, stop = sys.argv[1], sys.argv[2]
bad = reads = 0
print("reading", flush=True)
while not os.path.exists(stop):
    reads += 1
    try:
        json.loads(open(path, encoding="utf-8").read())
    except ValueError:
        bad += 1
print(json.dumps({"bad": bad, "reads": reads}))
"""
REWRITES = 200


def test_an_engine_reading_config_json_while_another_start_rewrites_it_sees_a_whole_file(tmp_path: Path) -> None:
    # Several engines started on one model root (tests/simengine/conftest.py's engine_factory) each rewrite
    # target/ and drafter/ while the engines started before them read config.json: an engine that read an
    # empty file exited with "config.json is not valid JSON" before it could become ready. The reader runs
    # from before the first rewrite to after the last, however slow this machine is.
    paths = write_model_dirs(tmp_path / "models")
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(Path(paths["model_path"]) / "config.json"), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        for _ in range(REWRITES):
            write_model_dirs(tmp_path / "models")
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    seen = json.loads(out)
    assert seen["reads"] >= REWRITES // 4, seen  # the two really overlapped (a dozen reads per rewrite here)
    assert seen["bad"] == 0, f"{seen['bad']} of {seen['reads']} reads saw a partial config.json ({REWRITES} rewrites)"
    draft = Path(paths["draft_model_path"]) / "config.json"
    assert json.loads(draft.read_text(encoding="utf-8"))["block_size"] == 8
