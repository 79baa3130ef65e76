"""Fixtures of the rehearsal: the results root and the test host (helpers: rehearsal_host.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_py.simengine.fixtures import write_model_dirs
from tests.rehearsal.rehearsal_host import ADDRESS, ENV, NAME, NETWORK, ROOT, in_host, network, podman, wanted


@pytest.fixture(scope="session")
def results_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """REHEARSAL_RESULTS (make rehearsal: results/rehearsal-<run id>), else in pytest's temporary directory."""
    base = os.environ.get("REHEARSAL_RESULTS")
    root = Path(base) if base else tmp_path_factory.mktemp("rehearsal")
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest.fixture(scope="session")
def testhost(results_root: Path) -> Iterator[str]:
    """The bare test host, up with the GPU stand-ins and sshd on its own address (REPRODUCE.md's host)."""
    if not wanted():
        pytest.skip("set SGLANG_REHEARSAL=1 (podman, the test-host image, the wheelhouse: make rehearsal)")
    network()
    if os.environ.get("KEEP") == "1" and podman("ps", "-q", "--filter", f"name=^{NAME}$").strip():
        yield ADDRESS  # a host kept from the last run (KEEP=1): for working on the rehearsal itself
        return
    subprocess.run([str(ROOT / "testhost" / "down.sh"), NAME], env=ENV, check=False, capture_output=True)
    up_env = {**ENV, "TESTHOST_NETWORK": NETWORK, "TESTHOST_IP": ADDRESS, "TESTHOST_GPU_PROFILE": "rtx-pro-6000"}
    started = time.monotonic()
    up = subprocess.run([str(ROOT / "testhost" / "up.sh"), NAME], env=up_env, capture_output=True, text=True,
                        timeout=600, check=False)  # fmt: skip
    (results_root / "up.log").write_text(up.stdout + up.stderr)
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"rehearsal: test host {NAME} at {ADDRESS} up in {time.monotonic() - started:.0f} s")
    try:
        yield ADDRESS
    finally:
        if os.environ.get("KEEP") != "1":
            subprocess.run([str(ROOT / "testhost" / "down.sh"), NAME], env=ENV, check=False, capture_output=True)
            subprocess.run(["podman", "network", "rm", "-f", NETWORK], env=ENV, check=False, capture_output=True)


@pytest.fixture(scope="session")
def weights(testhost: str) -> str:
    """REPRODUCE.md step 1 when it has not run: the target and the drafter under /models, laid down by hand
    (SIMULATED directories: config.json only)."""
    if _exists():
        return testhost
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_model_dirs(tmp)
        in_host("mkdir", "-p", "/models")
        podman("cp", paths["model_path"], f"{NAME}:/models/Kimi-K2.6")
        podman("cp", paths["draft_model_path"], f"{NAME}:/models/Kimi-K2.6-DFlash")
        in_host("chmod", "-R", "o+rX", "/models")
    return testhost


def _exists() -> bool:
    return subprocess.run(["podman", "exec", NAME, "test", "-f", "/models/Kimi-K2.6-DFlash/config.json"], env=ENV,
                          check=False).returncode == 0  # fmt: skip
