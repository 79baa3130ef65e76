"""Documentation of the controller_json_write action (plugins/action/controller_json_write.py): no module code."""

from __future__ import annotations

DOCUMENTATION = r"""
module: controller_json_write
short_description: Write a JSON document on the controller, atomically, without running a module
description:
  - An action that runs in the controller's worker process; no module is built, transferred or started (a
    delegated M(ansible.builtin.copy) to localhost costs a local module run, about half a second on a small
    controller).
  - Writes O(data) to O(dest) as indented JSON (sorted keys, a final newline) through a temporary file in the same
    directory, fsync and rename, so a reader (a sweep resuming after an interruption) sees the old document or the
    new one, never half of one; then sets O(mode). Missing directories are created.
  - Changes nothing on the host and always reports unchanged (the report is a by-product of the run). Runs in check
    mode too.
  - Needs the repro-py Python package on the controller.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  dest: {description: "The file on the controller (C(~) is expanded).", type: path, required: true}
  data: {description: "The document, any value JSON can hold (absent: C(null)).", type: raw}
  mode: {description: The file's mode as an octal string., type: str, default: "0644"}
"""

EXAMPLES = r"""
- name: Write the report on the controller
  ddtree.sglang.controller_json_write:
    dest: "results/{{ inventory_hostname }}/deploy-report.json"
    data: "{{ report }}"
"""

RETURN = r"""
dest: {description: The file written (its path expanded)., returned: success, type: str}
"""
