"""probe_hosts on two deployed test hosts (testhost/up-fleet.sh 2, then
``ansible-playbook -i tests/fleet/inventory site.yml``): the hosts site.yml deployed side by side are one class, read
over SSH with sudo from the state the roles wrote. A host whose series state file is gone, edited or unreadable, and
one nothing answers for, are tests/sweep/test_hostclass_play.py's (the same play and module on local-connection
hosts); a host down at a fleet run's start is left out by name in test_fleet_sweep_testhost.py. Needs
SGLANG_TESTHOST=1.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from repro_py.ansibleaccess import AnsibleAccess
from repro_py.sweep import hostclass
from tests.fleet.hosts import HOSTS, INVENTORY, ROOT, TESTHOST, podman

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
