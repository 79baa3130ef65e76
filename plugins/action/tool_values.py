"""Template the variables the controller tools read, exactly as the play would, and hand them over in a file.

``tool_values`` runs on the controller (no module, no connection): each variable
named in ``names`` is templated with this host's variables, with ansible-core's own
precedence (inventory, role defaults and vars of the including role, extra vars)
and vault decryption. The result is written to ``dest`` as JSON
``{"values": {name: value}, "errors": {name: why}}``, created with mode 0600
(``O_EXCL``: an existing file is never overwritten). A variable that is not
defined at all is left out; one whose value cannot be templated (an undefined
variable inside it, a vault value without its password) is an error that names
it. Values never appear in the task result (the task is ``no_log`` too); an error
message that would quote the value of a variable named in ``secrets`` has it
replaced by ``<redacted>``.

Used by ``playbooks/tool_values.yml`` (``repro_py.inventory_values``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ansible.module_utils.common.json import AnsibleJSONEncoder
from ansible.plugins.action import ActionBase


def _redact(message: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            message = message.replace(secret, "<redacted>")
    return message


def write_exclusive(dest: Path, doc: object) -> None:
    """``doc`` as JSON at ``dest``, created 0600 and never over an existing file."""
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, cls=AnsibleJSONEncoder, sort_keys=True)
        fh.write("\n")


class ActionModule(ActionBase):
    """Template ``names`` for this host; write them to ``dest`` (0600)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("names", "secrets", "dest"))
    _supports_check_mode = True
    _supports_async = False

    def _template(
        self, names: list[str], secret_names: list[str], task_vars: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, str]]:
        values: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for name in names:
            if name not in task_vars:
                continue
            try:
                value = self._templar.template(task_vars[name])
                # a round trip through JSON: lazy containers and vault values become plain data now,
                # while an error can still be attributed to this variable
                values[name] = json.loads(json.dumps(value, cls=AnsibleJSONEncoder))
            except Exception as exc:
                errors[name] = " ".join(str(exc).split())
        secrets = [str(values[n]) for n in secret_names if isinstance(values.get(n), str) and len(values[n]) >= 4]
        return values, {name: _redact(msg, secrets) for name, msg in errors.items()}

    def run(self, tmp=None, task_vars=None):  # type: ignore[no-untyped-def]
        result = super().run(tmp, task_vars)
        names = self._task.args.get("names")
        dest = self._task.args.get("dest")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return {**result, "failed": True, "msg": "names must be a list of variable names"}
        if not dest or not isinstance(dest, str):
            return {**result, "failed": True, "msg": "dest must be a path on the controller"}
        secret_names = [str(n) for n in self._task.args.get("secrets") or []]
        values, errors = self._template(names, secret_names, dict(task_vars or {}))
        try:
            write_exclusive(Path(dest), {"values": values, "errors": errors})
        except OSError as exc:
            return {**result, "failed": True, "msg": f"cannot write {dest}: {exc.strerror}"}
        return {**result, "changed": False, "resolved": sorted(values), "unresolved": sorted(errors)}
