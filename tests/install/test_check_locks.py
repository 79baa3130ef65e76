"""scripts/check-locks.py on small crafted lock files (offline), and on the committed locks."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from install_helpers import ROOT

H = "--hash=sha256:" + "ab" * 32


def lock(*pins: str) -> str:
    lines = ["# crafted", ""]
    for pin in pins:
        lines += [f"{pin} \\", f"    {H}", "    # via test"]
    return "\n".join(lines) + "\n"


GOOD = lock(
    "cuda-toolkit==13.0.3.0",
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cublas==13.1.1.3",
    "nvidia-nvjitlink==13.0.88",
    "torch==2.14.1",
)


def run(check_locks: ModuleType, tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    path = tmp_path / "sglang-0.5.23-cu130.lock"
    path.write_text(text)
    rc = check_locks.main(["--offline", str(path)])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_consistent_lock_passes(check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = run(check_locks, tmp_path, GOOD, capsys)
    assert rc == 0, out
    assert "ok (consistency" in out


def test_floating_crt_fails_naming_package_and_versions(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = run(check_locks, tmp_path, GOOD.replace("nvidia-cuda-crt==13.0.88", "nvidia-cuda-crt==13.5.1"), capsys)
    assert rc == 1
    assert "nvidia-cuda-crt==13.5.1 does not belong to CUDA toolkit 13.0.3.0" in out
    assert "pins nvidia-cuda-crt==13.0.88" in out
    assert "the CUDA compiler parts disagree" in out


def test_toolkit_numbered_package_not_in_table(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = run(check_locks, tmp_path, GOOD.replace("nvidia-nvjitlink==13.0.88", "nvidia-nvjitlink==13.5.37"), capsys)
    assert rc == 1
    assert "nvidia-nvjitlink==13.5.37 is not a CUDA 13.0 component" in out


def test_wrong_meta_package_and_library(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GOOD.replace("cuda-toolkit==13.0.3.0", "cuda-toolkit==13.0.2").replace("13.1.1.3", "13.2.0.9")
    rc, out = run(check_locks, tmp_path, text, capsys)
    assert rc == 1
    assert "cuda-toolkit==13.0.2, expected the pinned toolkit 13.0.3.0" in out
    assert "nvidia-cublas==13.2.0.9" in out


def test_nvcc_without_crt_and_torch_build_tag(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = GOOD.replace("nvidia-cuda-crt==13.0.88 \\\n    " + H + "\n    # via test\n", "").replace(
        "torch==2.14.1", "torch==2.14.1+cu129"
    )
    rc, out = run(check_locks, tmp_path, text, capsys)
    assert rc == 1
    assert "nvcc is locked but nvidia-cuda-crt is not" in out
    assert "torch==2.14.1+cu129 is a cu129 build, expected cu130" in out


def test_unpinned_and_unhashed_requirements_fail(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = run(check_locks, tmp_path, GOOD + "aiohttp>=3.10\npyyaml==6.0.4\n", capsys)
    assert rc == 1
    assert "aiohttp is not pinned with ==" in out
    assert "pyyaml==6.0.4 has no --hash" in out


def test_cu12_leftover_is_a_warning(
    check_locks: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = run(check_locks, tmp_path, GOOD + lock("nvidia-cutlass-dsl-libs-cu12==4.8.0"), capsys)
    assert rc == 0
    assert "warning: sglang-0.5.23-cu130.lock: nvidia-cutlass-dsl-libs-cu12==4.8.0 is a CUDA 12 build" in out


def test_compare_pins_reports_drift(check_locks: ModuleType) -> None:
    old = check_locks.parse_lock(GOOD)
    new = check_locks.parse_lock(GOOD.replace("torch==2.14.1", "torch==2.15.0") + lock("extra-pkg==1.0"))
    report = check_locks.Report()
    check_locks.compare_pins("x.lock", old, new, report)
    assert "x.lock: torch is locked at 2.14.1, re-resolves to 2.15.0" in report.errors
    assert "x.lock: re-resolving adds extra-pkg==1.0" in report.errors


def test_committed_locks_are_consistent(check_locks: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    rc = check_locks.main(["--offline"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    production = check_locks.parse_lock((ROOT / "requirements" / "sglang-0.5.23-cu130.lock").read_text())
    assert production["sglang"].version == "0.5.23"
    assert production["nvidia-cuda-nvcc"].version == "13.0.88"
    assert production["cuda-toolkit"].version == "13.0.3.0"
