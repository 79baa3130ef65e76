"""A role used on its own sees the shared defaults (``roles/ddtree_defaults``, a dependency of every role).

``preflight`` alone, with no ``sglang_service`` in the play, checks the unit, the model paths, the GPU count, the venv
and the pinned versions that the other roles deploy, and an inventory's value of a shared variable reaches it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import yaml
from conftest import ROOT

SHARED = yaml.safe_load((ROOT / "roles/ddtree_defaults/defaults/main.yml").read_text(encoding="utf-8"))


def _derived(run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path, *extra: str) -> dict[str, object]:
    out = tmp_path / "derived.json"
    res = run_playbook("-i", "localhost,", "tests/deploy/shared_defaults.yml", "-e", f"out_file={out}", *extra)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return dict(json.loads(out.read_text()))


def test_preflight_alone_derives_its_checks_from_the_shared_defaults(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    got = _derived(run_playbook, tmp_path)  # no inventory values (-i localhost,): the shared defaults themselves
    assert got == {
        "jit_unit_path": f"/etc/systemd/system/{SHARED['sglang_service_name']}.service",
        "gpu_count_min": SHARED["sglang_service_tp_size"],
        "model_dirs": [SHARED["sglang_service_model_path"], SHARED["sglang_service_drafter_path"]],
        "venv_path": SHARED["python_env_venv_path"],
        "sglang_version_expected": SHARED["sglang_patches_version"],
        "nvcc_release_expected": SHARED["cuda_toolkit_nvcc_release"],
        "cuda_major_expected": SHARED["cuda_toolkit_version"].split(".")[0],
        "driver_min": SHARED["preflight_driver_min"],
        "model_user": SHARED["sglang_service_user"],
    }


def test_an_inventorys_shared_value_reaches_a_role_used_alone(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    got = _derived(run_playbook, tmp_path, "-e", json.dumps(
        {"sglang_service_name": "sglang-b8", "sglang_service_tp_size": 8, "python_env_venv_path": "/srv/venv",
         "cuda_toolkit_version": "14.0.1"}))  # fmt: skip
    assert got["jit_unit_path"] == "/etc/systemd/system/sglang-b8.service"
    assert got["gpu_count_min"] == 8 and got["venv_path"] == "/srv/venv" and got["cuda_major_expected"] == "14"
