"""The sglang_patch_series module: apply, idempotence, re-apply, atomic failure, refusal, check mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from install_helpers import COLLECTIONS, PRISTINE, make_patch

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")

INFO = "sglang/srt/speculative/dflash_info.py"
TRITON = "sglang/srt/layers/attention/triton_backend.py"
NEW_FILE = "sglang/srt/speculative/ddtree_utils.py"

TRITON_FIXED = PRISTINE[TRITON].replace(
    "        self.num_draft_tokens = server_args.speculative_num_draft_tokens\n",
    "        # DDTree: the target verifies budget + 1 tokens.\n"
    "        self.num_draft_tokens = server_args.speculative_ddtree_budget + 1\n",
)
INFO_V1 = PRISTINE[INFO].replace("line 10\n", "line 10 (ddtree)\n")
INFO_V2 = PRISTINE[INFO].replace("line 10\n", "line 10 (ddtree v2)\n").replace("line 25\n", "line 25 changed\n")

P1 = ("0001-triton-budget.patch", make_patch(TRITON, PRISTINE[TRITON], TRITON_FIXED))
P2 = ("0002-dflash-info.patch", make_patch(INFO, PRISTINE[INFO], INFO_V1))
P2_V2 = ("0002-dflash-info.patch", make_patch(INFO, PRISTINE[INFO], INFO_V2))
P3_NEW = ("0003-ddtree-utils.patch", make_patch(NEW_FILE, None, "def build_tree():\n    return []\n"))

Run = Callable[..., dict[str, object]]


def live(tree: dict[str, Path], rel: str) -> str | None:
    path = tree["sp"] / rel
    return path.read_text() if path.exists() else None


def state(tree: dict[str, Path]) -> dict[str, object]:
    data: dict[str, object] = json.loads(tree["state"].read_text())
    return data


def test_apply_writes_tree_state_and_pristine(run_series: Run, tree: dict[str, Path], sps: ModuleType) -> None:
    result = run_series([P1, P2])
    assert result["changed"] is True
    assert result["action"] == "apply"
    assert live(tree, TRITON) == TRITON_FIXED
    assert live(tree, INFO) == INFO_V1
    st = state(tree)
    assert [p["name"] for p in st["patches"]] == [P1[0], P2[0]]  # type: ignore[index, union-attr]
    assert st["patches"][0]["sha256"] == sps.sha256_bytes(P1[1].encode())  # type: ignore[index]
    assert st["files"][TRITON]["patched_sha256"] == sps.sha256_bytes(TRITON_FIXED.encode())  # type: ignore[index]
    assert (tree["pristine"] / "sglang-0.5.23" / TRITON).read_text() == PRISTINE[TRITON]
    assert "+        self.num_draft_tokens = server_args.speculative_ddtree_budget + 1" in str(result["diff"])


def test_rerun_is_idempotent(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2])
    before = tree["state"].read_bytes()
    result = run_series([P1, P2])
    assert result["changed"] is False
    assert result["action"] == "none"
    assert result["files"] == []
    assert tree["state"].read_bytes() == before
    assert live(tree, INFO) == INFO_V1


def test_changed_patch_restores_pristine_and_reapplies(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2])
    result = run_series([P1, P2_V2])
    assert result["changed"] is True
    assert result["action"] == "reapply"
    assert result["files"] == [INFO]
    assert live(tree, INFO) == INFO_V2  # v2 applied on pristine, not on top of v1
    assert live(tree, TRITON) == TRITON_FIXED
    assert run_series([P1, P2_V2])["changed"] is False


def test_hand_edited_patched_file_is_repaired(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2])
    (tree["sp"] / TRITON).write_text(TRITON_FIXED + "# local edit\n")
    result = run_series([P1, P2])
    assert result["action"] == "reapply"
    assert result["files"] == [TRITON]
    assert live(tree, TRITON) == TRITON_FIXED


def test_removed_patch_restores_its_files(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2])
    result = run_series([P1])
    assert result["files"] == [INFO]
    assert live(tree, INFO) == PRISTINE[INFO]
    assert INFO not in state(tree)["files"]  # type: ignore[operator]


def test_failing_patch_leaves_tree_unchanged_and_shows_reject(
    run_series: Run, tree: dict[str, Path], sps: ModuleType
) -> None:
    expected = PRISTINE[INFO].replace("line 20\n", "line twenty\n")
    bad = make_patch(INFO, expected, PRISTINE[INFO].replace("line 20\n", "line XX\n"))
    with pytest.raises(sps.PatchSeriesError) as err:
        run_series([P1, ("0002-bad.patch", bad)])
    msg = str(err.value)
    assert "0002-bad.patch does not apply" in msg
    assert "left unchanged" in msg
    assert "rejected hunks" in msg
    assert "-line twenty" in msg and "+line XX" in msg  # the hunk itself
    # P1 applied fine in the scratch tree, but nothing reached the live tree.
    assert live(tree, TRITON) == PRISTINE[TRITON]
    assert live(tree, INFO) == PRISTINE[INFO]
    assert not tree["state"].exists()
    assert not list(tree["sp"].rglob("*.rej")) and not list(tree["sp"].rglob("*.orig"))


def test_failing_patch_after_applied_series_keeps_previous_state(
    run_series: Run, tree: dict[str, Path], sps: ModuleType
) -> None:
    run_series([P1, P2])
    before = tree["state"].read_bytes()
    bad = make_patch(INFO, "nothing\nlike\nthis\n", "something\n")
    with pytest.raises(sps.PatchSeriesError):
        run_series([P1, P2, ("0003-bad.patch", bad)])
    assert tree["state"].read_bytes() == before
    assert live(tree, INFO) == INFO_V1 and live(tree, TRITON) == TRITON_FIXED


def test_version_mismatch_is_refused(run_series: Run, tree: dict[str, Path], sps: ModuleType) -> None:
    pattern = r"installed sglang is 0\.5\.23, but the patch series targets sglang 0\.5\.24"
    with pytest.raises(sps.PatchSeriesError, match=pattern):
        run_series([P1], target="0.5.24")
    assert live(tree, TRITON) == PRISTINE[TRITON]


def test_check_mode_changes_nothing(run_series: Run, tree: dict[str, Path]) -> None:
    result = run_series([P1, P2], check_mode=True)
    assert result["changed"] is True
    assert sorted(result["files"]) == sorted([TRITON, INFO])  # type: ignore[type-var]
    assert "+line 10 (ddtree)" in str(result["diff"])
    assert live(tree, TRITON) == PRISTINE[TRITON]
    assert not tree["state"].exists()
    assert not tree["pristine"].exists()
    run_series([P1, P2])
    assert run_series([P1, P2_V2], check_mode=True)["files"] == [INFO]
    assert live(tree, INFO) == INFO_V1


def test_empty_series_on_stock_tree_is_a_noop(run_series: Run, tree: dict[str, Path]) -> None:
    result = run_series([])
    assert result["changed"] is False
    assert result["action"] == "none"
    assert not tree["state"].exists()


def test_empty_series_restores_a_patched_tree(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2, P3_NEW])
    assert live(tree, NEW_FILE) is not None
    result = run_series([])
    assert result["action"] == "restore"
    assert live(tree, TRITON) == PRISTINE[TRITON]
    assert live(tree, INFO) == PRISTINE[INFO]
    assert live(tree, NEW_FILE) is None  # created by the series, removed with it
    assert state(tree)["patches"] == []
    assert run_series([])["changed"] is False


def test_tree_modified_without_state_is_refused(run_series: Run, tree: dict[str, Path], sps: ModuleType) -> None:
    (tree["sp"] / TRITON).write_text(TRITON_FIXED)  # patched by hand, no pristine copy kept
    with pytest.raises(sps.PatchSeriesError, match="differs from the installed package's RECORD"):
        run_series([P1])


def test_reinstalled_package_is_repatched(run_series: Run, tree: dict[str, Path]) -> None:
    run_series([P1, P2])
    (tree["sp"] / TRITON).write_text(PRISTINE[TRITON])  # pip reinstalled sglang
    (tree["sp"] / INFO).write_text(PRISTINE[INFO])
    result = run_series([P1, P2])
    assert result["action"] == "reapply"
    assert live(tree, TRITON) == TRITON_FIXED and live(tree, INFO) == INFO_V1


def test_touched_files_strips_one_component(sps: ModuleType) -> None:
    assert sps.touched_files(P1[1]) == [TRITON]
    assert sps.touched_files(P3_NEW[1]) == [NEW_FILE]
    with pytest.raises(sps.PatchSeriesError, match="leaves site-packages"):
        sps.touched_files("--- a/../etc/passwd\n+++ b/../etc/passwd\n")


def test_module_through_ansible(tree: dict[str, Path], tmp_path: Path) -> None:
    """The module entry point, run by ansible on localhost (check mode, then for real)."""
    ansible = Path(sys.executable).parent / "ansible"
    if not ansible.exists():
        pytest.skip("ansible is not installed next to this python")
    args = json.dumps(
        {
            "venv_path": str(tree["venv"]),
            "target_version": "0.5.23",
            "patches": [{"name": P1[0], "content": P1[1]}],
            "state_path": str(tree["state"]),
            "pristine_dir": str(tree["pristine"]),
        }
    )
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    base = [str(ansible), "localhost", "-c", "local", "-m", "ddtree.sglang.sglang_patch_series", "-a", args]
    check = subprocess.run([*base, "--check", "--diff"], env=env, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "CHANGED" in check.stdout and live(tree, TRITON) == PRISTINE[TRITON]
    real = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert real.returncode == 0, real.stdout + real.stderr
    assert live(tree, TRITON) == TRITON_FIXED
    again = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert "SUCCESS" in again.stdout, again.stdout + again.stderr
    wrong = args.replace("0.5.23", "0.5.22", 1)
    bad = subprocess.run([*base[:-1], wrong], env=env, capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "targets sglang 0.5.22" in bad.stdout
