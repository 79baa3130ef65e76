"""The server's own log as part of the losslessness verdict.

Patch 0009's KV-window invariant raises ``DDTree KV window overrun: ...`` before
a verify step would write another request's KV slots; a traceback anywhere in
the serving invocation means the engine hit an exception while the outputs were
being measured. Either fails the gate, whatever the outputs: the lines are the
invocation's journal (the sweep asks for exactly the invocation that served the
config, ``journalctl _SYSTEMD_INVOCATION_ID=...``, filtered on the host by
``PATTERN``) or a log file given to ``python -m repro_py.gates --server-log``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

INVARIANT = "DDTree KV window overrun"
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Scheduler hit an exception")
#: what the journal is filtered on (a PCRE2 pattern for journalctl --grep; also a Python regex)
PATTERN = r"DDTree KV window overrun|Traceback \(most recent call last\)|Scheduler hit an exception"
#: the most matching lines asked for (the last ones; a few show the cause)
SCAN_LINES = 200
_UNAVAILABLE = "(journal unavailable"


def scan(lines: Sequence[str] | None, *, source: str) -> dict[str, Any]:
    """What the log shows: ``{"scanned", "source", "lines", "invariant": [...], "tracebacks": [...],
    "passed", "reason"}``; ``lines`` None or a journal the reconfigurer could not read: not scanned."""
    if lines is None or any(line.startswith(_UNAVAILABLE) for line in lines):
        why = next((line for line in lines or () if line.startswith(_UNAVAILABLE)), "no log")
        return {"scanned": False, "source": source, "reason": f"the server log could not be read: {why}"}
    invariant = [line for line in lines if INVARIANT in line]
    tracebacks = [line for line in lines if TRACEBACK.search(line)]
    reason = None
    if invariant:
        reason = f"the server log shows the KV-window invariant failing ({len(invariant)} lines): {invariant[0][:300]}"
    elif tracebacks:
        reason = f"the server log shows an exception while serving ({len(tracebacks)} lines): {tracebacks[0][:300]}"
    return {
        "scanned": True, "source": source, "lines": len(lines), "invariant": invariant[:5],
        "tracebacks": tracebacks[:5], "passed": reason is None, "reason": reason,
    }


def apply(lossless: dict[str, Any], found: dict[str, Any]) -> None:
    """Record the scan in the lossless result; a failing scan fails the gate (verdict ``server_log``)."""
    lossless["server_log"] = found
    if found.get("scanned") and not found.get("passed"):
        lossless["passed"] = False
        lossless["verdict"] = "server_log"
        lossless["is_reference"] = False
        lossless["reason"] = "; ".join(r for r in (found.get("reason"), lossless.get("reason")) if r)
