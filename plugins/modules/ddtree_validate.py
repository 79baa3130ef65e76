"""Documentation of the ddtree_validate action (plugins/action/ddtree_validate.py): no module code."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ddtree_validate
short_description: Validate the deployment inputs and the speculative-decoding settings on the controller
description:
  - An action that runs entirely on the controller; it never transfers or runs a module, so a bad input is refused
    before any connection to the host is opened. Every problem found is named in RV(problems) and the task fails.
  - The speculative-decoding rules are those of the repro-py package's C(spec_config) (the same rules the sweep
    planner and the simulated engine use), so a configuration is accepted or refused with the same message
    everywhere. The repro-py package must be installed on the controller.
  - A short key given explicitly (O(explicit), such as C(-e budget=8)) beats the role variable's value (O(config)),
    wherever that value came from (inventory, role default, or an extra var of the long name).
  - Never changes anything; runs in check mode too.
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  read_vars:
    description:
      - Read O(explicit) and O(config) from the play's variables by the contract's names (each short key, each
        field's role variable), templated as Ansible templates a module argument, so no task spells the fields.
      - Not together with O(explicit) or O(config). Must be a real boolean.
    type: bool
    default: false
  explicit:
    description: The short keys given on the command line; a key whose value is undefined or null is not given.
    type: dict
    default: {}
  config:
    description:
      - The role variables' values of the same short keys (inventory or role defaults).
      - The keys the algorithm does not use (the DDTree keys for C(dflash), every speculative key for C(none)) are
        dropped from here; they are defaults, not a request.
    type: dict
    default: {}
  drafter_path: {description: The draft model's path for the engine flags., type: str}
  integers:
    description: "Further integer inputs (ports, parallel sizes) as C({name: {value, min, max}}); decimal strings are
      accepted, booleans refused. C(min) defaults to 0, C(max) to 2147483647."
    type: dict
    default: {}
  booleans: {description: "C({name: value}); each value must be a real boolean.", type: dict, default: {}}
  choices: {description: "C({name: {value, allowed}}); the value must be one of C(allowed).", type: dict, default: {}}
  engine_choices:
    description:
      - "C({name: {value, choices, allow_empty}}): C(choices) names one of sglang 0.5.23's own lists
        (C(attention_backend), C(tool_call_parser), C(reasoning_parser)) the value must be in; with C(allow_empty),
        an empty value means not set."
    type: dict
    default: {}
  exposure:
    description:
      - "C({host, api_key_set, key_problems, allow_unauthenticated}): a bind address beyond loopback needs an API key
        unless C(allow_unauthenticated) is true; C(key_problems) names keys that are not one printable word."
      - Only booleans and names travel here, never a key.
    type: dict
  faults:
    description: The simulated engine's faults, for the run label's suffix (a list, or one string).
    type: raw
    default: []
"""

EXAMPLES = r"""
- name: Validate the service inputs and the speculative settings (controller)
  ddtree.sglang.ddtree_validate:
    read_vars: true
    drafter_path: /models/drafter
    integers:
      sglang_service_port: {value: "{{ sglang_service_port }}", min: 1024, max: 65535}
    booleans:
      sglang_service_enable_metrics: "{{ sglang_service_enable_metrics }}"
    choices:
      sglang_service_engine: {value: "{{ sglang_service_engine }}", allowed: [sglang, simulated]}
    engine_choices:
      sglang_service_attention_backend: {value: "{{ sglang_service_attention_backend }}", choices: attention_backend}
    exposure:
      host: "{{ sglang_service_host }}"
      api_key_set: "{{ sglang_service_api_key | length > 0 }}"
  register: validated
"""

RETURN = r"""
config: {description: The normalized short keys of the configuration., returned: success, type: dict}
label: {description: The run label (with the faults' suffix)., returned: success, type: str}
echo: {description: What C(/server_info) must report for this configuration., returned: success, type: dict}
echo_keys:
  description: Every field's C(/server_info) key (the C(echo_keys) of M(ddtree.sglang.sglang_wait_ready)).
  returned: success
  type: list
  elements: str
engine_flags:
  description: The speculative part of the engine's command line.
  returned: success
  type: list
  elements: str
integers: {description: The O(integers) as ints., returned: success, type: dict}
attention_backends:
  description: sglang 0.5.23's C(--attention-backend) choices.
  returned: success
  type: list
  elements: str
problems:
  description: Every problem found (empty on success).
  returned: success, and when the inputs are refused
  type: list
  elements: str
"""
