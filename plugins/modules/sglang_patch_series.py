#!/usr/bin/python
# Ansible module layout (documentation before imports) and os.path style, as Ansible modules are written.
# ruff: noqa: E402, PTH103, PTH108, PTH110, PTH112, PTH113, PTH116, PTH118, PTH120, PTH123
"""Apply an ordered patch series to an installed Python package (sglang)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_patch_series
short_description: Apply an ordered patch series to an installed sglang package
description:
  - Applies patches (unified diffs for C(patch -p1), paths relative to site-packages, such as
    C(sglang/srt/...)) in series order to the sglang package installed in a virtual environment.
  - Refuses when the installed package version differs from the series' target version.
  - The desired tree is always "the series applied to the pristine files". Pristine copies of every
    file a patch touches are kept under O(pristine_dir) before the first change; a file taken from the
    live tree as pristine must match the installed package's RECORD checksum.
  - The whole series is first applied to a scratch copy; the live tree is only written when every patch
    applied, so a failing patch leaves the tree unchanged and the error shows the rejected hunks.
  - Idempotent - when the live files already equal the desired result and the state file records the
    same series, nothing changes. A changed patch, a patch added or removed, or a patched file modified
    by hand all lead to restoring the pristine files and re-applying the series. An empty series restores
    every previously patched file to pristine.
  - Keeps a JSON state file with each patch's name and sha256 and each touched file's checksums.
  - Supports check mode and diff mode.
version_added: "1.0.0"
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  venv_path:
    description: Virtual environment holding the package; its single C(lib/python*/site-packages) is used.
    type: path
  site_packages:
    description: The site-packages directory; overrides the one found under O(venv_path).
    type: path
  package:
    description: Distribution and top-level package name.
    type: str
    default: sglang
  target_version:
    description: The package version the series was written for.
    type: str
    required: true
  patches:
    description: The series in order; each item has C(name) and C(content) (the diff text).
    type: list
    elements: dict
    default: []
  state_path:
    description: JSON state file.
    type: path
    default: /var/lib/sglang-deploy/sglang-patches.state.json
  pristine_dir:
    description: Where pristine copies are kept (a subdirectory per package version is used).
    type: path
    default: /var/lib/sglang-deploy/pristine
  patch_executable:
    description: GNU patch.
    type: str
    default: patch
"""

EXAMPLES = r"""
- name: Apply the DDTree series
  ddtree.sglang.sglang_patch_series:
    venv_path: /opt/sglang/venv
    target_version: "0.5.23"
    patches:
      - name: 0001-ddtree-flags.patch
        content: "{{ lookup('ansible.builtin.file', 'patches/0001-ddtree-flags.patch') }}"
"""

RETURN = r"""
action:
  description: One of C(none), C(apply), C(reapply), C(restore), C(state) (only the state file changed).
  type: str
  returned: always
applied:
  description: Names of the patches in effect after the run.
  type: list
  elements: str
  returned: always
files:
  description: Site-packages relative paths whose content changed (or would change in check mode).
  type: list
  elements: str
  returned: always
site_packages:
  description: The site-packages directory used.
  type: str
  returned: always
installed_version:
  description: The installed package version.
  type: str
  returned: always
state_path:
  description: The JSON state file.
  type: str
  returned: always
state:
  description: The state that is (or, in check mode, would be) recorded.
  type: dict
  returned: always
"""

import json
import os
import subprocess
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_patch_files import (
    PatchSeriesError,
    atomic_write,
    find_dist_info,
    find_site_packages,
    installed_version,
    read_bytes,
    read_record,
    series_sha256,
    sha256_bytes,
    sha256_file,
    sha_or_none,
    touched_files,
    unified,
)

STATE_SCHEMA = 1


# ----------------------------------------------------------------------------
# The series


class PatchSeries:
    def __init__(self, params: dict[str, Any], check_mode: bool = False) -> None:
        self.p = params
        self.check_mode = check_mode
        self.package: str = params.get("package") or "sglang"
        self.target: str = params["target_version"]
        self.patch_exe: str = params.get("patch_executable") or "patch"
        self.state_path: str = params.get("state_path") or "/var/lib/sglang-deploy/sglang-patches.state.json"
        self.patches = []
        for item in params.get("patches") or []:
            if not isinstance(item, dict) or "name" not in item or "content" not in item:
                raise PatchSeriesError("each item of 'patches' needs 'name' and 'content'")
            content = str(item["content"])
            if content and not content.endswith("\n"):
                content += "\n"  # lookup('file') strips the final newline
            self.patches.append(
                {"name": str(item["name"]), "content": content, "sha256": sha256_bytes(content.encode())}
            )

    # -- discovery -----------------------------------------------------------
    def locate(self) -> None:
        sp = self.p.get("site_packages")
        if not sp:
            if not self.p.get("venv_path"):
                raise PatchSeriesError("one of venv_path or site_packages is required")
            sp = find_site_packages(self.p["venv_path"], self.package)
        if not os.path.isdir(sp):
            raise PatchSeriesError(f"site-packages {sp} does not exist")
        self.site_packages = os.path.realpath(sp)
        dist_info = find_dist_info(self.site_packages, self.package)
        if dist_info is None:
            raise PatchSeriesError(f"{self.package} is not installed in {self.site_packages}")
        self.version = installed_version(dist_info)
        if self.version != self.target:
            raise PatchSeriesError(
                f"installed {self.package} is {self.version}, but the patch series targets {self.package} "
                f"{self.target}: refusing to patch (install {self.package}=={self.target} or use the series "
                f"for {self.version})"
            )
        self.record = read_record(dist_info)
        self.pristine_root = os.path.join(
            self.p.get("pristine_dir") or "/var/lib/sglang-deploy/pristine", f"{self.package}-{self.version}"
        )

    def load_state(self) -> dict[str, Any] | None:
        data = read_bytes(self.state_path)
        if data is None:
            return None
        try:
            state = json.loads(data)
        except ValueError as exc:
            raise PatchSeriesError(
                f"state file {self.state_path} is not JSON ({exc}); remove it after checking the tree"
            ) from exc
        if not isinstance(state, dict) or state.get("schema") != STATE_SCHEMA:
            raise PatchSeriesError(f"state file {self.state_path} has an unknown schema")
        # State from another version or another environment: its pristine copies do not apply here.
        if state.get("version") != self.version or state.get("site_packages") != self.site_packages:
            return None
        return state

    # -- pristine baseline ---------------------------------------------------
    def baseline(self, rel: str, state: dict[str, Any] | None) -> bytes | None:
        """Pristine content of rel (None = the file does not exist in the pristine tree)."""
        known = (state or {}).get("files", {}).get(rel)
        if known is not None:
            if not known.get("existed", True):
                return None
            data = read_bytes(os.path.join(self.pristine_root, rel))
            if data is None or sha256_bytes(data) != known.get("pristine_sha256"):
                raise PatchSeriesError(
                    f"pristine copy of {rel} under {self.pristine_root} is missing or damaged: reinstall "
                    f"{self.package}=={self.version} and remove {self.state_path}"
                )
            return data
        live = os.path.join(self.site_packages, rel)
        data = read_bytes(live)
        if data is None:
            return None
        want = self.record.get(rel)
        if want is not None and sha256_bytes(data) != want:
            raise PatchSeriesError(
                f"{live} differs from the installed package's RECORD and no pristine copy is kept (patched "
                f"outside this role, or state file lost): reinstall {self.package}=={self.version} first"
            )
        return data

    # -- apply in a scratch tree ----------------------------------------------
    def build_desired(self, files: list[str], base: dict[str, bytes | None]) -> dict[str, bytes | None]:
        with tempfile.TemporaryDirectory(prefix="sglang-patch-series-") as scratch:
            tree = os.path.join(scratch, "tree")
            os.makedirs(tree)
            for rel in files:
                if base[rel] is not None:
                    dest = os.path.join(tree, rel)
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "wb") as f:
                        f.write(base[rel] or b"")
            for patch in self.patches:
                self.apply_one(tree, patch)
            return {rel: read_bytes(os.path.join(tree, rel)) for rel in files}

    def apply_one(self, tree: str, patch: dict[str, str]) -> None:
        """Dry-run the patch on the scratch tree, then apply it there."""
        cmd = [self.patch_exe, "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-d", tree]
        data = patch["content"].encode()
        try:
            dry = subprocess.run([*cmd, "--dry-run"], input=data, capture_output=True, check=False)
        except FileNotFoundError as exc:
            raise PatchSeriesError(f"'{self.patch_exe}' not found: install GNU patch") from exc
        real = None
        if dry.returncode == 0:
            real = subprocess.run(cmd, input=data, capture_output=True, check=False)
            if real.returncode == 0:
                return
        else:
            # Apply for real, in the scratch tree only, to obtain the .rej hunks.
            subprocess.run(cmd, input=data, capture_output=True, check=False)
        proc = real if real is not None else dry
        out = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip()
        rejects = self.collect_rejects(tree)
        raise PatchSeriesError(
            f"patch {patch['name']} does not apply to {self.package} {self.version} "
            f"(the installed tree was left unchanged):\n{out}"
            + (f"\n--- rejected hunks ---\n{rejects}" if rejects else "")
        )

    @staticmethod
    def collect_rejects(tree: str) -> str:
        chunks = []
        for dirpath, _dirs, names in os.walk(tree):
            for name in sorted(names):
                if name.endswith(".rej"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, tree)
                    chunks.append(f"{rel}:\n" + (read_bytes(path) or b"").decode("utf-8", "replace"))
        return "\n".join(chunks)

    # -- main ------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.locate()
        state = self.load_state()
        old_files: dict[str, Any] = (state or {}).get("files", {})

        touched: list[str] = []
        per_patch: list[dict[str, Any]] = []
        for patch in self.patches:
            files = touched_files(patch["content"])
            if not files:
                raise PatchSeriesError(f"patch {patch['name']} touches no file (not a unified diff?)")
            per_patch.append({"name": patch["name"], "sha256": patch["sha256"], "files": files})
            touched.extend(f for f in files if f not in touched)
        union = touched + sorted(f for f in old_files if f not in touched)

        base = {rel: self.baseline(rel, state) for rel in union}
        desired = self.build_desired(touched, base)
        for rel in union:
            if rel not in touched:
                desired[rel] = base[rel]  # no longer patched: back to pristine

        live = {rel: read_bytes(os.path.join(self.site_packages, rel)) for rel in union}
        changed_files = [rel for rel in union if live[rel] != desired[rel]]

        new_state: dict[str, Any] = {
            "schema": STATE_SCHEMA,
            "package": self.package,
            "version": self.version,
            "site_packages": self.site_packages,
            "series_sha256": series_sha256(self.patches),
            "patches": per_patch,
            "files": {
                rel: {
                    "existed": base[rel] is not None,
                    "pristine_sha256": sha_or_none(base[rel]),
                    "patched_sha256": sha_or_none(desired[rel]),
                }
                for rel in touched
            },
        }
        if not self.patches and state is None and not changed_files:
            action = "none"  # empty series, never patched: plain stock package
        elif not changed_files:
            keys = ("series_sha256", "patches", "files")
            same = state is not None and all(state.get(k) == new_state[k] for k in keys)
            action = "none" if same else "state"
        elif not self.patches:
            action = "restore"
        elif state is None or not old_files:
            action = "apply"
        else:
            action = "reapply"

        result: dict[str, Any] = {
            "changed": action != "none",
            "action": action,
            "applied": [p["name"] for p in self.patches],
            "files": changed_files,
            "site_packages": self.site_packages,
            "installed_version": self.version,
            "state_path": self.state_path,
            "state": new_state,
            "diff": {"prepared": "".join(unified(rel, live[rel], desired[rel]) for rel in changed_files)},
        }
        if action == "none" or self.check_mode:
            return result

        # Keep pristine copies before touching the live tree.
        for rel in touched:
            if base[rel] is not None and rel not in old_files:
                dest = os.path.join(self.pristine_root, rel)
                if sha256_file(dest) != sha256_bytes(base[rel] or b""):
                    atomic_write(dest, base[rel] or b"", 0o644)
        for rel in changed_files:
            path = os.path.join(self.site_packages, rel)
            if desired[rel] is None:
                if os.path.exists(path):
                    os.unlink(path)
                continue
            mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
            atomic_write(path, desired[rel] or b"", mode)
        new_state["applied_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write(self.state_path, (json.dumps(new_state, indent=2, sort_keys=True) + "\n").encode(), 0o644)
        # Pristine copies of files no longer patched are no longer needed.
        for rel in old_files:
            if rel not in touched:
                stale = os.path.join(self.pristine_root, rel)
                if os.path.isfile(stale):
                    os.unlink(stale)
        return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv_path": {"type": "path"},
            "site_packages": {"type": "path"},
            "package": {"type": "str", "default": "sglang"},
            "target_version": {"type": "str", "required": True},
            "patches": {"type": "list", "elements": "dict", "default": []},
            "state_path": {"type": "path", "default": "/var/lib/sglang-deploy/sglang-patches.state.json"},
            "pristine_dir": {"type": "path", "default": "/var/lib/sglang-deploy/pristine"},
            "patch_executable": {"type": "str", "default": "patch"},
        },
        required_one_of=[("venv_path", "site_packages")],
        supports_check_mode=True,
    )
    try:
        result = PatchSeries(module.params, check_mode=module.check_mode).run()
    except PatchSeriesError as exc:
        module.fail_json(msg=str(exc))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
