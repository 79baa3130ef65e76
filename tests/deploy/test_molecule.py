"""End to end on the podman systemd test host: `molecule test` (slow, ~15 min).

Enabled with SGLANG_TESTHOST=1 (needs podman, runc, debootstrap and network
access for the wheelhouse). It converges site.yml with the simulated engine,
checks idempotence, then verifies behaviour (a real request). `make test` runs
the scenario itself on its main test host (the molecule-testhost-run stage:
SGLANG_MOLECULE_INSTANCE=sglang-testhost, no destroy; the service checks follow on that host).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, wants_testhost

pytestmark = pytest.mark.testhost


@pytest.mark.skipif(not wants_testhost(), reason="set SGLANG_TESTHOST=1 to run molecule on the podman test host")
def test_molecule_default_scenario():
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    molecule = Path(sys.executable).parent / "molecule"
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")}
    res = subprocess.run(
        [str(molecule), "test"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
