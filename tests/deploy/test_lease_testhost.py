"""The host lease on the deployed systemd test host, through playbooks/reconfigure.yml (a deploy).

A deploy is refused at once while a live run holds the lease, the server untouched; a lease whose
holder's process is gone on this controller is taken over (reported) and given back at the end.
Needs the deployed test host (`make deploy`) and SGLANG_TESTHOST=1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, load_module, wants_testhost
from test_service_testhost import reconfigure, serving, sh, unit

pytestmark = [
    pytest.mark.testhost,
    pytest.mark.skipif(not wants_testhost(), reason="set SGLANG_TESTHOST=1 (make service-checks)"),
]

rules = load_module("sglang_lease", ROOT / "plugins/module_utils/sglang_lease.py")
LEASE = "/run/sglang-deploy/host.lease"


def put_lease(doc: dict[str, object]) -> None:
    sh("sh", "-c", f'mkdir -p /run/sglang-deploy && printf %s "$1" > {LEASE}', "_", json.dumps(doc))


@pytest.fixture
def no_lease_after() -> Iterator[None]:
    yield
    sh("rm", "-f", LEASE)


def test_a_deploy_is_refused_while_a_live_run_holds_the_lease(tmp_path: Path, no_lease_after: None) -> None:
    me = {**rules.process_identity(os.getpid()), "controller_host": socket.gethostname()}
    put_lease({**rules.new_lease("sweep-live", "sweep other", me, rules.boot_id()),
               "since": "2000-01-01T00:00:00+00:00"})  # fmt: skip
    before = unit()
    rc, _, out = reconfigure(tmp_path, "-e", "{\"sglang_service_force_restart\": true}", name="leased")
    assert rc != 0, out
    assert "the host is leased to sweep other (lease sweep-live)" in out and "since 2000-01-01" in out
    assert unit()["InvocationID"] == before["InvocationID"] and serving()  # untouched
    assert json.loads(sh("cat", LEASE).stdout)["lease_id"] == "sweep-live"


def test_a_lease_of_a_gone_process_is_taken_over_and_given_back(tmp_path: Path, no_lease_after: None) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    gone = {**rules.process_identity(proc.pid), "controller_host": socket.gethostname()}
    proc.kill()
    proc.wait()
    put_lease(rules.new_lease("sweep-killed", "sweep killed", gone, rules.boot_id()))
    rc, report, out = reconfigure(tmp_path, name="takeover")
    assert rc == 0, out
    assert "took over the host lease from sweep killed (lease sweep-killed)" in out
    assert report.get("status") == "ready"
    assert sh("test", "-e", LEASE, check=False).returncode != 0  # the deploy gave its lease back
