"""How a config fails: the four failure classes and the reasons the runner states.

Every config ends in a result file with ``status`` ``ok`` or ``failed``; a
failure always carries its class and reason:

``invalid_config``            the play's own validation refused it (the planner refuses
                              invalid configs before anything runs)
``failed_to_start``           the restart did not reach a ready, echoing engine
``crashed_during_benchmark``  the engine stopped answering during the benchmark or gates, or a
                              benchmark cell failed (a failed repeat is never a measurement)
``gate_failed``               it ran, but a correctness gate (coding, lossless, config
                              echo) failed
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INVALID_CONFIG = "invalid_config"
FAILED_TO_START = "failed_to_start"
CRASHED = "crashed_during_benchmark"
GATE_FAILED = "gate_failed"
FAILURE_CLASSES = (INVALID_CONFIG, FAILED_TO_START, CRASHED, GATE_FAILED)


def failed_gates(gates: Mapping[str, Any]) -> list[str]:
    """Each failed gate as ``name: reason``."""
    out: list[str] = []
    for name, body in sorted(gates.items()):
        if not isinstance(body, Mapping):
            continue
        passed = body.get("passed")
        if passed is False:
            detail = body.get("reason") or body.get("summary") or body.get("message") or ""
            out.append(f"{name}: {detail}".rstrip(": ") if detail else name)
    return out


def bench_error_summary(bench: Mapping[str, Any] | None) -> str:
    """How many benchmark cells failed and the first one's reason; empty when none failed."""
    cells = (bench or {}).get("cells") or []
    errors = [c for c in cells if isinstance(c, Mapping) and c.get("status") in ("failed", "error")]
    if not errors:
        return ""
    first = errors[0]
    return (
        f"{len(errors)}/{len(cells)} cells failed; first: context={first.get('context')} "
        f"concurrency={first.get('concurrency')}: {first.get('reason')}"
    )
