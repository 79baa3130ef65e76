"""Write a JSON document on the controller, atomically, without executing a module.

``controller_json_write`` runs in the controller's worker process: no module is
built, transferred or started (a delegated ``copy`` to localhost costs a local
module run, about half a second on a small controller). The file is written with
``repro_py.atomicio`` (a temporary file in the same directory, fsync, rename), so
a reader (a sweep resuming after an interruption) sees the old report or the new
one, never half of one.

Arguments: ``dest`` (path on the controller), ``data`` (any JSON value),
``mode`` (octal string, default ``0644``). Changes nothing on the host;
``changed`` is always false (the report is a by-product of the run). Runs in
check mode too (the report of a check run says ``check_mode``).
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.action import ActionBase
from ansible_collections.ddtree.sglang.plugins.plugin_utils.contract import LazyRepro

atomicio = LazyRepro("repro_py.atomicio")


def write_json(dest: Path, data: object, mode: int) -> None:
    """``data`` as indented JSON (sorted keys, trailing newline) at ``dest``, atomically, then ``mode``."""
    atomicio.write_text_atomic(dest, json.dumps(data, indent=4, sort_keys=True, cls=AnsibleJSONEncoder) + "\n")
    dest.chmod(mode)


class ActionModule(ActionBase):
    """Write ``data`` to ``dest`` on the controller."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("dest", "data", "mode"))
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):  # type: ignore[no-untyped-def]
        result = super().run(tmp, task_vars)
        dest = self._task.args.get("dest")
        if not dest or not isinstance(dest, str):
            return {**result, "failed": True, "msg": f"dest must be a path on the controller, got {dest!r}"}
        mode_text = str(self._task.args.get("mode", "0644"))
        try:
            mode = int(mode_text, 8)
        except ValueError:
            return {**result, "failed": True, "msg": f"mode must be an octal string such as 0644, got {mode_text!r}"}
        path = Path(dest).expanduser()
        try:
            write_json(path, self._task.args.get("data"), mode)
        except (OSError, TypeError, ValueError) as exc:
            return {**result, "failed": True, "msg": f"cannot write {path}: {exc}"}
        return {**result, "changed": False, "dest": str(path)}
