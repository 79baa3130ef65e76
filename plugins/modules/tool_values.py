"""Documentation of the tool_values action (plugins/action/tool_values.py): no module code."""

from __future__ import annotations

DOCUMENTATION = r"""
module: tool_values
short_description: Template the variables the controller tools read and hand them over in a file
description:
  - An action that runs on the controller (no module, no connection to the host). Each variable named in O(names) is
    templated with this host's variables, with ansible-core's own precedence (inventory, role defaults and vars of
    the including role, extra vars) and vault decryption.
  - The result is written to O(dest) as a JSON object with C(values) (name -> value) and C(errors) (name -> why),
    created with mode 0600; an existing file is never overwritten (the task fails).
  - A variable that is not defined at all is left out; one whose value cannot be templated (an undefined variable
    inside it, a vault value without its password) is an error that names it.
  - Values never appear in the task result (give the task C(no_log) too); an error message that would quote the
    value of a variable named in O(secrets) has it replaced by C(<redacted>).
  - Used by the sglang_service role's C(tool_values) entry point (the repro-py tools' inventory values).
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  names: {description: The variables to template., type: list, elements: str, required: true}
  secrets:
    description: The variables among O(names) whose values must not appear in an error message.
    type: list
    elements: str
    default: []
  dest: {description: The file on the controller to create (it must not exist)., type: path, required: true}
"""

EXAMPLES = r"""
- name: Template the values the controller tools read and write them for the tool
  ddtree.sglang.tool_values:
    names: [sglang_service_port, sglang_service_api_key]
    secrets: [sglang_service_api_key]
    dest: "{{ values_dir }}/{{ inventory_hostname }}.json"
  no_log: true
"""

RETURN = r"""
resolved:
  description: The variables templated (their values are in O(dest) only).
  returned: success
  type: list
  elements: str
unresolved: {description: The variables that could not be templated., returned: success, type: list, elements: str}
"""
