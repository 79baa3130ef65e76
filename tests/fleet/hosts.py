"""What the fleet's test-host tests share: the two hosts, their inventory, podman, the skip marker."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "tests" / "fleet" / "inventory"
HOSTS = ["sglang-fleet-1", "sglang-fleet-2"]
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "testhost" / "containers.conf"), "PYTHONUNBUFFERED": "1"}

#: the marks of a test that needs the two deployed hosts (make fleet-hosts, then site.yml on INVENTORY)
TESTHOST = [
    pytest.mark.testhost,
    pytest.mark.skipif(os.environ.get("SGLANG_TESTHOST") != "1",
                       reason="set SGLANG_TESTHOST=1 (make fleet-hosts, then site.yml on tests/fleet/inventory)"),
]  # fmt: skip


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=180, check=check)
