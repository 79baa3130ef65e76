"""The series applies cleanly, in order, to the pristine 0.5.23 wheel,
reverse-applies cleanly, byte-compiles, and regenerates byte-identically."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import series  # from patches/tools (conftest puts it on sys.path)

HEADER_FIELDS = ("Series:", "Base:", "Purpose:", "Changes", "Tested")
PATCHES = 12


def test_series_lists_numbered_patches_in_order():
    names = [p.name for p in series.read_series()]
    assert len(names) == PATCHES
    assert [int(n[:4]) for n in names] == list(range(1, PATCHES + 1))
    on_disk = sorted(p.name for p in series.SERIES_DIR.glob("*.patch"))
    assert on_disk == names, "every patch file is in the series and vice versa"


@pytest.mark.parametrize("patch", series.read_series(), ids=lambda p: p.name[:4])
def test_every_patch_has_a_header(patch):
    header = series.patch_header(patch)
    for field in HEADER_FIELDS:
        assert field in header, f"{patch.name}: header lacks {field!r}"
    assert "sglang==0.5.23" in header
    assert re.search(rf"\b{int(patch.name[:4]):02d}/{PATCHES:02d}\b", header)
    assert patch.read_text().count("diff --git ") >= 1


def test_wheel_is_pinned(pristine_wheel):
    assert series.sha256_of(pristine_wheel) == series.WHEEL_SHA256


def test_apply_reverse_and_byte_compile(pristine_wheel):
    summary = series.check()
    assert len(summary["patches"]) == PATCHES
    touched = set(summary["files"])
    for must in (
        "sglang/srt/arg_groups/fields/spec.py",
        "sglang/srt/arg_groups/speculative_hook.py",
        "sglang/srt/speculative/spec_info.py",
        "sglang/srt/speculative/ddtree_utils.py",
        "sglang/srt/speculative/dflash_info.py",
        "sglang/srt/layers/attention/triton_backend.py",
        "sglang/srt/speculative/dflash_worker_v2.py",
        "sglang/srt/managers/scheduler_components/internal_state.py",
        "sglang/srt/speculative/dflash_info_v2.py",  # the KV reservation (0009)
        "sglang/srt/mem_cache/allocation_sizing.py",
        "sglang/srt/managers/tokenizer_manager.py",  # per-request refusals (0010)
        "sglang/srt/speculative/dflash_utils.py",  # the scheduler's per-request refusal (0010)
        "sglang/srt/sampling/watermarking/core.py",  # API keys redacted (0012)
        "sglang/srt/server_args.py",  # repr without the keys (0012)
    ):
        assert must in touched


def test_patched_tree_has_no_leftovers(patched_tree):
    leftovers = [p for p in patched_tree.rglob("*") if p.suffix in (".orig", ".rej")]
    assert leftovers == []


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_workspace_regen_round_trip(pristine_wheel, tmp_path):
    ws = series.make_workspace(tmp_path / "ws", only_touched=True)
    log = subprocess.run(
        ["git", "-C", str(ws), "log", "--format=%s", "pristine..HEAD"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert len([line for line in log if line.strip()]) == PATCHES
    out = tmp_path / "series"
    names = series.regen(ws, out)
    assert names == [p.name for p in series.read_series()]
    for name in [*names, "series"]:
        assert (out / name).read_bytes() == (series.SERIES_DIR / name).read_bytes(), name


ROLE_MODULE = series.REPO_ROOT / "plugins" / "modules" / "sglang_patch_series.py"


@pytest.mark.skipif(not ROLE_MODULE.exists(), reason="the collection's sglang_patch_series module is absent")
def test_role_module_applies_the_real_series(pristine_wheel, tmp_path):
    """Cross-check with the deployment path: the role's module applies this
    series to a site-packages holding the pristine wheel, then is idempotent."""
    import importlib.util  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    # its module_utils import by the collection's name (ansible_collections.ddtree.sglang..., the checkout's
    # .collections on the path)
    spec = importlib.util.spec_from_file_location("ddtree_role_sps", ROLE_MODULE)
    assert spec is not None and spec.loader is not None
    sps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sps)
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    only = set(series.series_files())
    with zipfile.ZipFile(pristine_wheel) as zf:
        zf.extractall(site, members=[n for n in zf.namelist() if n in only or ".dist-info/" in n])
    params = {
        "venv_path": str(tmp_path / "venv"),
        "site_packages": None,
        "package": "sglang",
        "target_version": series.SGLANG_VERSION,
        "patches": [{"name": p.name, "content": p.read_text()} for p in series.read_series()],
        "state_path": str(tmp_path / "state.json"),
        "pristine_dir": str(tmp_path / "pristine"),
        "patch_executable": "patch",
    }
    first = sps.PatchSeries(params, check_mode=False).run()
    assert first["action"] == "apply" and len(first["files"]) == len(series.series_files()) == 16
    again = sps.PatchSeries(params, check_mode=False).run()
    assert again["changed"] is False
    patched = series.unpack(tmp_path / "ref", only=series.series_files())
    series.apply_series(patched)
    for rel in first["files"]:
        assert (site / rel).read_bytes() == (patched / rel).read_bytes(), rel
