"""The long steps run as async jobs on the host, polled with a line per poll: no SSH session idles through them.

The venv install (~11 GB for the production lock), the JIT compile check (up to 1,800 s) and collect.yml's
model checksums (10-40 min over 555 GB) each start with ``async``/``poll: 0`` and are waited for by an
``async_status`` loop (``until`` finished, ``retries`` x ``delay`` covering the timeout). A checksum run that
fails or is cut fails the play: no ``failed_when: false``, and no file of empty checksums written for it.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from conftest import ROOT


def _tasks(doc: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(doc, list):
        for item in doc:
            out += _tasks(item)
    elif isinstance(doc, dict):
        if "name" in doc and not ("hosts" in doc and "tasks" in doc):
            out.append(doc)
        for key in ("tasks", "block", "rescue", "always"):
            out += _tasks(doc.get(key))
    return out


LONG = [
    ("roles/python_env/tasks/install.yml", "Start the install of the lock", "python_env_install_timeout"),
    ("roles/preflight/tasks/jit.yml", "Go on waiting for the compile as an async job", "preflight_jit_timeout"),
    ("playbooks/collect.yml", "Start the checksums of the model and drafter files", "collect_checksum_timeout"),
]


@pytest.mark.parametrize(("path", "start", "timeout"), LONG)
def test_started_as_an_async_job_and_polled(path: str, start: str, timeout: str) -> None:
    tasks = _tasks(yaml.safe_load((ROOT / path).read_text()))
    index = next(i for i, t in enumerate(tasks) if str(t["name"]).startswith(start))
    job = tasks[index]
    assert timeout in str(job["async"]) and job["poll"] == 0, job
    wait = tasks[index + 1]
    status = wait.get("ansible.builtin.async_status")
    assert status and job["register"] in status["jid"], wait
    assert wait["until"] == f"{wait['register']}.finished"
    assert "delay" in wait and timeout in str(wait["retries"])


def test_collect_writes_no_empty_checksums() -> None:
    text = (ROOT / "playbooks" / "collect.yml").read_text()
    tasks = _tasks(yaml.safe_load(text))
    checksum = [t for t in tasks if "checksum" in str(t["name"]).lower()]
    assert checksum and not [t for t in checksum if t.get("failed_when") is False]
    assert "or '{}'" not in text  # a missing output is never turned into {} checksums
    check = next(t for t in tasks if str(t["name"]).startswith("Check the checksums"))
    assert "_collect_checksums.rc | default(1) == 0" in check["ansible.builtin.assert"]["that"]
    writer = next(t for t in tasks if str(t["name"]).startswith("Write the snapshot files"))
    assert tasks.index(check) < tasks.index(writer)

