"""The collection as a user gets it: ``ansible-galaxy collection build``, installed into a fresh path, then used
from outside this repository by FQCN (``ansible-doc``, a playbook of its own). Nothing here reads the checkout's
own collection link: the installed copy is the only ``ddtree.sglang`` Ansible can see."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: what the roles read from the collection's root, and the collection's own parts
MUST_HOLD = (
    "meta/runtime.yml", "CHANGELOG.md", "docs/collection.md", "playbooks/site.yml",
    "roles/sglang_service/meta/argument_specs.yml", "roles/sglang_service/tasks/main.yml",
    "plugins/modules/sglang_wait_ready.py", "plugins/module_utils/sglang_host.py",
    "plugins/action/ddtree_validate.py", "plugins/plugin_utils/contract.py",
    "patches/sglang/0.5.23/series", "requirements/sglang-0.5.23-cu130.lock", "requirements/cuda-13.0.3-wheels.lock",
)  # fmt: skip
#: the checkout's tooling, test rig and the repro-py package (installed with pip, not with the collection)
MUST_NOT = ("repro_py", "inventory", "scripts", "testhost", "molecule", "results", "benchmarks", ".venv",
            ".collections", "MANIFEST.sha256", "Makefile", "ansible.cfg", "patches/tools")  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(the tarball, the collections path it is installed in, the environment that sees only that copy)."""
    work = tmp_path_factory.mktemp("collection")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(work / "collections"), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               PYTHONPATH=str(ROOT))  # repro-py, as pip install puts it on the path; not the checkout's .collections
    build = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(work), str(ROOT)],
                           cwd=work, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = work.glob("ddtree-sglang-*.tar.gz")
    done = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(work / "collections"),
                           str(tarball)], cwd=work, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0 and "installed successfully" in done.stdout, done.stdout + done.stderr
    return tarball, work / "collections", env


def test_the_tarball_holds_what_the_roles_read_and_none_of_the_checkouts_tooling(installed) -> None:
    tarball, _, _ = installed
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    missing = [n for n in MUST_HOLD if n not in names]
    assert not missing, missing
    stray = sorted(n for n in names if any(n == x or n.startswith(x + "/") for x in MUST_NOT))
    assert not stray, stray[:20]
    # of the test suite only ansible-test's ignore file ships (each entry with its reason)
    assert sorted(n for n in names if n.startswith("tests/")) == ["tests/sanity", "tests/sanity/ignore-2.19.txt"]
    with tarfile.open(tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert manifest["collection_info"]["namespace"] == "ddtree" and manifest["collection_info"]["name"] == "sglang"


def test_ansible_doc_documents_the_modules_and_the_roles_entry_points(installed) -> None:
    _, coll, env = installed
    doc = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "ddtree.sglang.sglang_wait_ready"], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert doc.returncode == 0, doc.stderr
    assert str(coll) in doc.stdout and "echo_keys" in doc.stdout, doc.stdout[:2000]
    role = subprocess.run([str(BIN / "ansible-doc"), "-t", "role", "ddtree.sglang.sglang_service"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert role.returncode == 0, role.stderr
    entries = re.findall(r"^ENTRY POINT: \*?([a-z_]+)\*?", role.stdout, flags=re.M)
    assert entries == ["main", "resolve", "lease", "lease_release", "tool_values"], entries
    listed = subprocess.run([str(BIN / "ansible-doc"), "-t", "module", "-l", "ddtree.sglang"], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    for name in ("sglang_wait_ready", "sglang_patch_series", "preflight_stack_versions", "ddtree_validate"):
        assert f"ddtree.sglang.{name}" in listed.stdout, listed.stdout


PLAYBOOK = """\
- name: A user's own play, outside the bundle's repository
  hosts: gpu_hosts
  gather_facts: false
  tasks:
    - name: Validate and resolve the configuration (controller only)
      ansible.builtin.import_role:
        name: ddtree.sglang.sglang_service
        tasks_from: resolve
    - name: Show the resolved label
      ansible.builtin.debug:
        msg: "label={{ _sglang_service_label }}"
"""


def test_a_playbook_outside_the_repository_validates_with_the_installed_roles(installed, tmp_path: Path) -> None:
    _, coll, env = installed
    (tmp_path / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu_hosts:\n      hosts:\n        gpu-1:\n"
                                        "          ansible_connection: local\n", encoding="utf-8")  # fmt: skip
    base = [str(BIN / "ansible-playbook"), "-i", "hosts.yml", "play.yml", "-vvv"]
    good = subprocess.run([*base, "-e", "budget=8", "-e", "topk=4"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert good.returncode == 0, good.stdout[-4000:] + good.stderr[-2000:]
    assert '"msg": "label=ddtree-b8-t4-w2048-bs8"' in good.stdout, good.stdout[-3000:]
    # the role's tasks came from the installed copy, never from the checkout
    paths = re.findall(r"^task path: (\S+?):\d+$", good.stdout, flags=re.M)
    installed_role = f"{coll}/ansible_collections/ddtree/sglang/roles/sglang_service/tasks/resolve.yml"
    assert installed_role in paths, paths
    assert not [p for p in paths if p.startswith(str(ROOT))], paths
    bad = subprocess.run([*base, "-e", "budget=8", "-e", "topk=9"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert bad.returncode != 0
    assert "topk=9 is out of range (topk must be <= budget=8); allowed 1..8" in bad.stdout, bad.stdout[-3000:]
