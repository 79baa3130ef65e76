"""preflight's free-space check measures the disk and refuses one short of space, naming the path and both figures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess


def _run(run_playbook: Callable[..., CompletedProcess[str]], checks: list[dict[str, object]]) -> CompletedProcess[str]:
    return run_playbook("-i", "localhost,", "tests/deploy/preflight_disk.yml",
                        "-e", json.dumps({"preflight_disk_checks": checks}))  # fmt: skip


def _reported_gib(flat: str, path: Path) -> float:
    """The free GiB the refusal names for ``path``."""
    return float(flat.split(f"{path} has ", 1)[1].split(" GiB free", 1)[0])


def test_a_disk_short_of_space_is_refused_with_the_path_and_both_figures(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    free_gib = shutil.disk_usage(tmp_path).free / 2**30
    wanted = int(free_gib) + 1000
    res = _run(
        run_playbook, [{"path": str(tmp_path), "min_free_gb": 1}, {"path": str(tmp_path), "min_free_gb": wanted}]
    )
    flat = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0, flat[-2000:]
    assert f"{tmp_path} has " in flat, flat[-2000:]
    assert f"GiB free; at least {wanted} GiB is required (preflight_disk_checks)" in flat, flat[-2000:]
    assert abs(_reported_gib(flat, tmp_path) - free_gib) < 1.0, (_reported_gib(flat, tmp_path), free_gib)


def test_a_disk_with_the_space_passes_and_a_missing_path_is_measured_at_the_root(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    res = _run(run_playbook, [{"path": str(tmp_path), "min_free_gb": 1}])
    assert res.returncode == 0, " ".join((res.stdout + res.stderr).split())[-2000:]
    missing = tmp_path / "not-yet"
    wanted = int(shutil.disk_usage("/").free / 2**30) + 1000
    res = _run(run_playbook, [{"path": str(missing), "min_free_gb": wanted}])
    flat = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0 and f"{missing} has " in flat, flat[-2000:]
    assert abs(_reported_gib(flat, missing) - shutil.disk_usage("/").free / 2**30) < 1.0, _reported_gib(flat, missing)
