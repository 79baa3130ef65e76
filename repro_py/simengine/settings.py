"""The resolved configuration of one simulated engine process (built by ``cli.resolve``).

Its own module so that the serving modules (lifecycle, server, state) import
it without importing the command line: no import circles.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from repro_py import spec_config
from repro_py.simengine.faults import Faults

SGLANG_VERSION = "0.5.23"


@dataclasses.dataclass(frozen=True)
class Settings:
    """The resolved configuration of one engine process."""

    args: dict[str, Any]  # every resolved flag, as server info reports it
    model_path: str
    served_model_name: str
    host: str
    port: int
    api_key: str | None
    admin_api_key: str | None
    enable_metrics: bool
    reasoning_parser: str | None
    context_length: int
    spec: spec_config.SpecConfig
    drafter_block_size: int | None
    max_running_requests: int
    kv_tokens: int
    speed: float
    seed: int
    load_seconds: float
    warmup_seconds: float
    linger_seconds: float
    health_seconds: float
    skip_warmup: bool
    host_profile: str
    faults: Faults
    decode_log_interval: int
    include_usage_default: bool
    warnings: tuple[str, ...]
    launch_command: str

    @property
    def tree_mode(self) -> bool:
        return self.spec.algorithm == "ddtree"

    @property
    def bonus_unadjusted_active(self) -> bool:
        """The bonus-unadjusted fault bites only tree verification (DDTree) of sampled requests."""
        return self.faults.bonus_unadjusted and self.tree_mode

    @property
    def mask_offset_active(self) -> bool:
        return self.faults.mask_offset_active(self.tree_mode, self.spec.budget, self.spec.block_size)


_KEY_FLAGS = ("--api-key", "--admin-api-key")
_KEY_ARGS = ("api_key", "admin_api_key")


def redact_key_args(args: dict[str, Any]) -> dict[str, Any]:
    """A copy of the resolved arguments with the API keys set (not None) read ``<redacted>``."""
    return {k: "<redacted>" if k in _KEY_ARGS and v is not None else v for k, v in args.items()}


def redact_keys(argv: list[str]) -> list[str]:
    """``argv`` with the API key values replaced, as the patched sglang reports its command
    line (patch 0012: launch_command, /server_info, the ``server_args=`` log line)."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        flag = arg.split("=", 1)[0]
        if i > 0 and argv[i - 1] in _KEY_FLAGS:
            out.append("<redacted>")
        elif flag in _KEY_FLAGS and "=" in arg:
            out.append(f"{flag}=<redacted>")
        else:
            out.append(arg)
    return out
