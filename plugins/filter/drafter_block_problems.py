"""The drafter's trained block size against the configured one, by the contract's rule (``repro_py.spec_config``).

``{{ spec | ddtree.sglang.drafter_block_problems(config_text, allow_block_mismatch) }}`` is the list of problems
(empty: none) of a resolved configuration (``ddtree_validate``'s ``config``) beside the drafter's ``config.json`` as
read on the host. The rule and its message are ``spec_config.block_mismatch``'s, the block size is read as sglang
0.5.23 reads it (``spec_config.drafter_block_size``), so the controller's validation runs once per play
(``ddtree_validate``) and this host-side rule has one owner too. Documentation: ``drafter_block_problems.yml``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.ddtree.sglang.plugins.plugin_utils.contract import LazyRepro, plain

spec_config = LazyRepro("repro_py.spec_config")


def drafter_block_problems(spec: object, config_text: object, allow_block_mismatch: object = False) -> list[str]:
    spec, config_text, allow_block_mismatch = plain(spec), plain(config_text), plain(allow_block_mismatch)
    if not isinstance(spec, Mapping):
        raise AnsibleFilterError(f"drafter_block_problems: the configuration must be a mapping, not {spec!r}")
    allow, err = spec_config.parse_bool("allow_block_mismatch", allow_block_mismatch)
    if err:
        return [str(err)]
    if spec.get("algorithm") == "none" or config_text is None:
        return []
    try:
        drafter = json.loads(str(config_text))
    except ValueError as exc:
        return [f"the drafter's config.json is not valid JSON ({exc})"]
    if not isinstance(drafter, Mapping):
        return ["the drafter's config.json is not a JSON object"]
    try:
        trained = spec_config.drafter_block_size(drafter)
    except spec_config.SpecConfigError as exc:
        return list(exc.problems)
    block = spec.get("block_size")
    mismatch = spec_config.block_mismatch(block if isinstance(block, int) else None, trained, bool(allow))
    return [mismatch] if mismatch else []


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"drafter_block_problems": drafter_block_problems}
