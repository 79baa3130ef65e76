"""probe_hosts on two deployed test hosts (testhost/up-fleet.sh 2, then
``ansible-playbook -i tests/fleet/inventory site.yml``): one class of two; a host whose series state file is
gone or edited flagged; a stopped host named unreachable while the other stays usable. Needs SGLANG_TESTHOST=1.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_py.ansibleaccess import AnsibleAccess
from repro_py.sweep import hostclass
from tests.fleet.hosts import ENV, HOSTS, INVENTORY, ROOT, TESTHOST, podman

PORTS = {"sglang-fleet-1": 31031, "sglang-fleet-2": 31032}
STATE = "/var/lib/sglang-deploy/sglang-patches.state.json"

pytestmark = TESTHOST



def probe(tmp_path: Path, name: str) -> tuple[dict[str, hostclass.HostProbe], float]:
    started = time.monotonic()
    probes = hostclass.probe_hosts(ROOT, [INVENTORY], HOSTS, access=AnsibleAccess(), private_dir=tmp_path / name)
    wall = time.monotonic() - started
    print(f"probe_hosts {name}: {wall:.1f} s: " + "; ".join(p.problem or f"{p.host} ok" for p in probes.values()))
    return probes, wall


@pytest.fixture(scope="module", autouse=True)
def fleet_up() -> None:
    for host in HOSTS:
        running = podman("inspect", "-f", "{{.State.Running}}", host, check=False).stdout.strip()
        assert running == "true", f"{host} is not running: make fleet-hosts, then site.yml on {INVENTORY}"


def test_the_deployed_hosts_are_one_class(tmp_path: Path) -> None:
    probes, wall = probe(tmp_path, "all")
    assert [p.problem for p in probes.values()] == [None] * len(HOSTS)
    (key, members), = hostclass.classes(probes).items()
    assert members == HOSTS
    first = probes[HOSTS[0]].host_class
    assert first is not None and first.key() == key
    assert first.series == hostclass.series_digest(ROOT / "patches" / "sglang" / "0.5.23")
    assert (first.gpu_count, first.driver, first.toolkit, first.sglang) == (8, "580.95.05", "13.0", "0.5.23")
    assert wall < 120


@pytest.fixture
def state_aside() -> Iterator[str]:
    """fleet-2's series state file, kept aside and put back whatever the test did to it."""
    host = "sglang-fleet-2"
    podman("exec", host, "cp", "-p", STATE, STATE + ".fleet-test")
    yield host
    podman("exec", host, "mv", STATE + ".fleet-test", STATE)


def test_a_host_without_its_series_state_or_with_another_is_flagged(tmp_path: Path, state_aside: str) -> None:
    host = state_aside
    podman("exec", host, "rm", STATE)
    probes, _ = probe(tmp_path, "missing")
    assert probes[host].problem == f"{host}: patch series not applied (state file {STATE} missing)"
    assert hostclass.classes(probes) == {probes[HOSTS[0]].host_class.key(): HOSTS[:1]}  # type: ignore[union-attr]

    edit = ("import json,sys; p=sys.argv[1]; d=json.load(open(p+'.fleet-test')); d['patches'][-1]['sha256']='0'*64; "
            "json.dump(d, open(p,'w'))")  # fmt: skip
    podman("exec", host, "python3", "-c", edit, STATE)
    probes, _ = probe(tmp_path, "differs")
    problem = probes[host].problem or ""
    assert problem.startswith(f"{host}: patch series ") and "differs from this bundle's" in problem
    assert hostclass.series_digest(ROOT / "patches" / "sglang" / "0.5.23") in problem
    assert [h for h, p in probes.items() if p.usable] == HOSTS[:1]


@pytest.fixture
def stopped() -> Iterator[str]:
    """fleet-2 stopped (podman stop), started again afterwards with its sshd (testhost/up.sh)."""
    host = "sglang-fleet-2"
    podman("stop", "-t", "0", host)
    yield host
    subprocess.run([str(ROOT / "testhost" / "up.sh"), host], env={**ENV, "TESTHOST_SSH_PORT": str(PORTS[host])},
                   capture_output=True, text=True, timeout=300, check=True)  # fmt: skip


def test_a_stopped_host_is_named_unreachable_and_the_others_stay_usable(tmp_path: Path, stopped: str) -> None:
    probes, wall = probe(tmp_path, "stopped")
    gone = probes[stopped]
    assert gone.host_class is None and gone.problem is not None
    assert gone.problem.startswith(f"{stopped}: unreachable (") and f"port {PORTS[stopped]}" in gone.problem
    assert [h for h, p in probes.items() if p.usable] == ["sglang-fleet-1"]
    assert list(hostclass.classes(probes).values()) == [["sglang-fleet-1"]]
    assert wall < 120
