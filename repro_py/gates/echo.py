"""Config-echo gate: the server must report the settings the config asked for.

``/server_info`` is compared with ``spec_config.expected_echo`` of the
config by ``spec_config.echo_differences``, the same expectation and
comparison the role's readiness check applies on the host: the algorithm
(DFLASH for DDTree and DFLASH, which DDTree is the tree mode of; none for the
baseline), the tree budget and top-K cap (unset unless DDTree), the block size
and the draft window. Any mismatch makes the config's results invalid.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from repro_py.bench.server_info import ServerInfo
from repro_py.spec_config import FIELD_BY_KEY, SpecConfig, echo_differences, expected_echo


@dataclasses.dataclass(frozen=True)
class Mismatch:
    field: str
    expected: object
    got: object

    def __str__(self) -> str:
        return f"{self.field}: expected {self.expected!r}, server reports {self.got!r}"


def check_echo(info: ServerInfo, expected: SpecConfig) -> list[Mismatch]:
    """Every setting the server reports differently from ``expected``; empty when they agree."""
    return [Mismatch(key, want, got) for key, want, got in echo_differences(info.raw, expected_echo(expected))]


def echo_result(info: ServerInfo, expected: SpecConfig) -> dict[str, Any]:
    mismatches = check_echo(info, expected)
    return {
        "passed": not mismatches,
        "expected": expected.as_short(),
        "reported": {
            **{FIELD_BY_KEY[key].echo: value for key, value in info.settings().items()},
            "speculative_num_draft_tokens": info.num_draft_tokens,
        },
        "mismatches": [dataclasses.asdict(m) for m in mismatches],
        "reason": "; ".join(map(str, mismatches)) or None,
    }
