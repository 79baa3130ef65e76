"""The per-config result file: what the runner writes loads; a file off the schema is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from repro_py.results.schema import REQUIRED_KEYS, ConfigResult, ResultError, load_result
from repro_py.sweep import state
from repro_py.sweep.runner import SweepOptions, SweepRunner
from tests.sweep.conftest import BUNDLE, FakeMeasure, FakeReconfigurer, make_plan

GRID: list[dict[str, object]] = [
    {"algorithm": "none"},
    {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048},
    {"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048},
]


async def _written(tmp_path: Path) -> list[Path]:
    plan = make_plan(GRID, tmp_path=tmp_path)
    run_dir = state.RunDir(tmp_path / "results" / "r1")
    runner = SweepRunner(
        plan,
        run_dir,
        FakeReconfigurer(fail={"ddtree-b16-t4-w2048-bs8": "engine exited: CUDA out of memory"}),
        FakeMeasure(),
        bundle=BUNDLE,
        options=SweepOptions(restore=False),
        console=Console(quiet=True),
    )
    await runner.run()
    return sorted(run_dir.configs.glob("*.json"))


async def test_results_written_by_the_runner_load(tmp_path: Path) -> None:
    paths = await _written(tmp_path)
    assert len(paths) == 3
    loaded = {p.stem: load_result(p) for p in paths}
    assert loaded["ddtree-b8-t4-w2048-bs8"]["status"] == "ok"
    failed = loaded["ddtree-b16-t4-w2048-bs8"]
    assert failed["status"] == "failed"
    assert failed["failure"] is not None and failed["failure"]["class"] == "failed_to_start"
    assert all(r["schema"] == 1 and r["run_id"] == "r1" for r in loaded.values())


def test_the_required_keys_are_the_typed_ones() -> None:
    assert set(REQUIRED_KEYS) == set(ConfigResult.__required_keys__)


@pytest.mark.parametrize("key", ["label", "status", "fingerprint", "bench", "wall_s"])
async def test_a_result_missing_a_required_key_is_refused_naming_file_and_key(tmp_path: Path, key: str) -> None:
    path = (await _written(tmp_path))[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    del doc[key]
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultError, match=f"{path}.*'{key}'") as err:
        load_result(path)
    assert err.value.path == path and err.value.key == key


async def test_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = (await _written(tmp_path))[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["schema"] = 2
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultError, match=f"{path}: 'schema' is 2; this version reads schema 1"):
        load_result(path)


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"status": "done"}, "status", "'status' is 'done'; allowed: ok, failed"),
        ({"wall_s": "soon"}, "wall_s", "'wall_s' is 'soon'; expected a number"),
        ({"status": "failed", "failure": None}, "failure", "status 'failed' needs a 'failure'"),
        ({"status": "failed", "failure": {"class": "boom", "reason": "x", "journal": []}}, "failure",
         "'failure.class' is 'boom'; allowed: invalid_config, failed_to_start"),
    ],
)  # fmt: skip
async def test_a_bad_value_is_refused_naming_file_key_and_what_is_allowed(
    tmp_path: Path, change: dict[str, object], key: str, words: str
) -> None:
    path = (await _written(tmp_path))[0]
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(change)
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ResultError) as err:
        load_result(path)
    assert str(err.value).startswith(f"{path}: ") and words in str(err.value)
    assert err.value.key == key


def test_a_file_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ResultError, match=f"{path}: not a JSON document"):
        load_result(path)
