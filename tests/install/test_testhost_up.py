"""testhost/up.sh brings a test host back whose processes were killed behind podman's back.

When a machine's processes are all killed at once (a CI runner's session ends, an
OOM sweep, `kill -9` of conmon), podman's record still says "running": the next
`podman exec` fails with "cannot exec in a stopped container", `podman stop`
leaves it "stopping" for good and `podman start` refuses it. up.sh must see that
the container is gone, say so, and bring up a working one, instead of waiting 120 s
for a systemd that no longer exists.

Runs in tests/install/run-host-checks.sh (SGLANG_TESTHOST=1): needs podman and the
test-host image. The container is a throwaway one, removed at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from install_helpers import ROOT

NAME = "sglang-uptest"
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "testhost" / "containers.conf"), "TESTHOST_BOOT_TIMEOUT": "60"}

pytestmark = [
    pytest.mark.testhost,
    pytest.mark.skipif(os.environ.get("SGLANG_TESTHOST") != "1", reason="set SGLANG_TESTHOST=1 (podman, image)"),
]


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=120, check=False)


def up() -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "testhost" / "up.sh"), NAME], env=ENV, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.fixture
def container() -> Iterator[str]:
    podman("rm", "-f", "-t", "0", NAME)
    yield NAME
    podman("rm", "-f", "-t", "0", NAME)


def kill_behind_podmans_back(name: str) -> None:
    """What a session stop does: conmon and the container's init die by SIGKILL."""
    pids = podman("inspect", "-f", "{{.State.ConmonPid}} {{.State.Pid}}", name).stdout.split()
    assert len(pids) == 2 and all(p.isdigit() and int(p) > 0 for p in pids), pids
    for pid in pids:
        os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while podman("exec", name, "true").returncode == 0:
        assert time.monotonic() < deadline, "the container still runs after SIGKILL"
        time.sleep(0.2)
    # the state this test is about: podman still calls it running
    assert podman("inspect", "-f", "{{.State.Status}}", name).stdout.strip() == "running"


def test_up_recreates_a_container_podman_calls_running_whose_processes_are_gone(container: str):
    first = up()
    assert first.returncode == 0, first.stdout + first.stderr
    kill_behind_podmans_back(container)

    again = up()
    assert again.returncode == 0, again.stdout + again.stderr
    assert "its processes are gone" in again.stdout, again.stdout
    assert podman("exec", container, "systemctl", "is-system-running").stdout.strip() in ("running", "degraded")
    # the GPU stand-ins are back in the new container
    assert podman("exec", container, "nvidia-smi", "-L").stdout.count("GPU ") == 8


def test_up_recovers_a_container_left_stopping_by_a_stop_of_a_dead_container(container: str):
    assert up().returncode == 0
    kill_behind_podmans_back(container)
    podman("stop", "-t", "1", container)  # what an operator tries first; podman leaves it "stopping"

    again = up()
    assert again.returncode == 0, again.stdout + again.stderr
    assert podman("exec", container, "systemctl", "is-system-running").stdout.strip() in ("running", "degraded")


def test_down_removes_a_container_whose_processes_are_gone(container: str):
    """molecule's destroy step and `make clean-testhost` use down.sh: a plain rm -f fails here."""
    assert up().returncode == 0
    kill_behind_podmans_back(container)
    down = subprocess.run([str(ROOT / "testhost" / "down.sh"), container], env=ENV, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"down: removed {container}" in down.stdout
    assert podman("container", "exists", container).returncode == 1
