"""A user's own playbook and inventory, outside this repository, converge the deployed test host with the roles
of the installed collection ``ddtree.sglang`` (built with ``ansible-galaxy collection build``, installed into a
fresh path): the playbook is docs/collection.md's, run as written; the inventory is the user's own, made from the
shipped ``inventory/local`` with only what must differ outside the repository (its paths to this checkout's
wheelhouse and lock made absolute). Then the server answers the OpenAI client's default request.
Needs SGLANG_TESTHOST=1 and the deployed test host (``make deploy``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, wants_testhost

pytestmark = [
    pytest.mark.testhost,
    pytest.mark.skipif(not wants_testhost(), reason="set SGLANG_TESTHOST=1 (make service-checks)"),
]

BIN = Path(sys.executable).parent
DOC = ROOT / "docs" / "collection.md"
LOCAL = ROOT / "inventory" / "local"


def documented_playbook() -> str:
    """The YAML block of docs/collection.md's "Use the roles in your own playbook"."""
    section = DOC.read_text(encoding="utf-8").split("## Use the roles in your own playbook", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert match, "docs/collection.md: no yaml block under 'Use the roles in your own playbook'"
    return match.group(1)


def users_inventory(where: Path) -> Path:
    """inventory/local's host and values under the group the documented playbook names, the paths made absolute."""
    hosts = yaml.safe_load((LOCAL / "hosts.yml").read_text(encoding="utf-8"))["all"]["children"]["sglang_servers"]
    inv = where / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"gpu_hosts": hosts}}}), encoding="utf-8")
    shutil.copytree(LOCAL / "group_vars" / "all", inv / "group_vars" / "all")
    shutil.copytree(LOCAL / "host_vars", inv / "host_vars")  # the host's connection
    install = inv / "group_vars" / "all" / "install.yml"
    text = install.read_text(encoding="utf-8").replace("{{ inventory_dir }}/../..", str(ROOT))
    assert "inventory_dir" not in text
    install.write_text(text, encoding="utf-8")
    return inv


def test_the_documented_playbook_converges_the_test_host_from_the_installed_collection(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    # the user's own configuration: the collection's path only, and the connection settings docs/collection.md asks for
    env.update(ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_PIPELINING="true", ANSIBLE_SSH_USETTY="false", PYTHONPATH=str(ROOT),
               ANSIBLE_BECOME_METHOD="sudo", ANSIBLE_HOST_KEY_CHECKING="true")  # fmt: skip
    galaxy = str(BIN / "ansible-galaxy")
    built = subprocess.run([galaxy, "collection", "build", "--output-path", str(tmp_path), str(ROOT)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = tmp_path.glob("ddtree-sglang-*.tar.gz")
    done = subprocess.run([galaxy, "collection", "install", "-p", str(tmp_path / "collections"), str(tarball)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "deploy.yml").write_text(documented_playbook(), encoding="utf-8")
    inv = users_inventory(tmp_path)
    play = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), "deploy.yml", "-v"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    out = play.stdout + play.stderr
    print(out[-4000:])
    assert play.returncode == 0, out[-6000:]
    recap = re.search(r"sglang-testhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", out)
    assert recap and int(recap.group(1)) > 50, out[-2000:]  # the whole stack ran, from the installed roles
    paths = re.findall(r"^task path: (\S+?):\d+$", out, flags=re.M)
    assert not [p for p in paths if p.startswith(str(ROOT))]
    service = yaml.safe_load((LOCAL / "group_vars" / "all" / "service.yml").read_text(encoding="utf-8"))
    body = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    req = urllib.request.Request(f"http://127.0.0.1:{service['sglang_service_port']}/v1/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and json.loads(resp.read())["choices"]
