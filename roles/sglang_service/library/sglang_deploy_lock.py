#!/usr/bin/python3
"""One deploy at a time per unit on a host (stdlib only).

``state: acquired`` creates the lock file atomically (O_EXCL) with the owner's
token; while another owner holds it, it polls until the holder releases it,
the lock is older than ``stale_after`` (an interrupted run; it is taken over)
or ``timeout`` passes (then it fails naming the holder). ``state: released``
removes the lock if this owner holds it. The lock lives under /run, so a
reboot clears it. Neither state reports a change: the pair leaves the host as
it was.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_deploy_lock
short_description: Serialize deploys of one unit on a host with an atomic lock file
options:
  path: {description: lock file, type: path, required: true}
  owner: {description: token naming this run, type: str, required: true}
  state: {description: acquire or release, type: str, default: acquired, choices: [acquired, released]}
  timeout: {description: seconds to wait for another holder, type: float, default: 1800}
  stale_after: {description: seconds after which a lock is treated as abandoned, type: float, default: 3600}
  poll_interval: {description: seconds between attempts, type: float, default: 0.5}
author: [sglang-ddtree deploy]
"""


def read_holder(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def try_acquire(path: Path, owner: str) -> bool:
    """Create the lock file atomically; True if this call created it."""
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"owner": owner, "acquired_at": time.time(), "pid": os.getpid()}, fh)
    return True


def acquire(path: Path, owner: str, timeout: float, stale_after: float, poll: float) -> dict:
    t0 = time.monotonic()
    took_over = None
    while True:
        if try_acquire(path, owner):
            return {"waited_s": round(time.monotonic() - t0, 3), "took_over": took_over}
        holder = read_holder(path)
        if holder.get("owner") == owner:
            return {"waited_s": round(time.monotonic() - t0, 3), "took_over": None, "already_held": True}
        age = time.time() - float(holder.get("acquired_at") or 0)
        if age > stale_after:
            took_over = holder
            path.unlink(missing_ok=True)
            continue
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(
                f"another deploy holds {path} (owner {holder.get('owner', '?')}, {age:.0f} s old); "
                f"waited {timeout:.0f} s; if no deploy is running any more, remove {path}"
            )
        time.sleep(poll)


def release(path: Path, owner: str) -> bool:
    if read_holder(path).get("owner") == owner:
        path.unlink(missing_ok=True)
        return True
    return False


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "owner": {"type": "str", "required": True},
            "state": {"type": "str", "default": "acquired", "choices": ["acquired", "released"]},
            "timeout": {"type": "float", "default": 1800.0},
            "stale_after": {"type": "float", "default": 3600.0},
            "poll_interval": {"type": "float", "default": 0.5},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = Path(p["path"])
    if module.check_mode:
        module.exit_json(changed=False, holder=read_holder(path))
    if p["state"] == "released":
        module.exit_json(changed=False, released=release(path, p["owner"]))
    try:
        result = acquire(path, p["owner"], p["timeout"], p["stale_after"], p["poll_interval"])
    except TimeoutError as exc:
        module.fail_json(msg=str(exc), holder=read_holder(path))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
