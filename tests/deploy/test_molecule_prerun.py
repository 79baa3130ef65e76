"""`molecule` converges the checkout, and leaves nothing in the user's home.

molecule's prerun builds the collection of a repository that has a galaxy.yml and installs the copy into
~/.ansible/collections. That path came before the checkout's .collections link, so molecule converged the
copy ("Another version of 'ddtree.sglang' 0.1.0 was found installed in .../.collections, only the first one
will be used, 0.1.0 (~/.ansible/collections/ansible_collections)"), and the copy stayed behind: any playbook
the user runs later, outside this repository, would use that snapshot of the roles by FQCN, however old.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_molecule_uses_the_checkout_and_installs_nothing_into_home(tmp_path: Path) -> None:
    molecule = Path(sys.executable).parent / "molecule"
    env = {**os.environ, "HOME": str(tmp_path), "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")}
    env.pop("ANSIBLE_HOME", None)
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    proc = subprocess.run([str(molecule), "syntax"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Another version of 'ddtree.sglang'" not in out, out[-4000:]
    installed = tmp_path / ".ansible" / "collections" / "ansible_collections" / "ddtree"
    assert not installed.exists(), sorted(str(p.relative_to(tmp_path)) for p in installed.rglob("*"))[:10]
