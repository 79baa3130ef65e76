"""The readiness wait's rules that need no HTTP: the unit's state, the config echo, the journal query (stdlib only).

Used by the sglang_wait_ready module (plugins/modules/sglang_wait_ready.py), which polls the unit and the server
and decides with these; unit-tested through that module.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the unit properties the wait reads on every poll (``systemctl show``)
SHOW_PROPS = (
    "ActiveState",
    "SubState",
    "MainPID",
    "InvocationID",
    "Result",
    "ExecMainStartTimestampMonotonic",
    "ExecMainExitTimestampMonotonic",
    "ExecMainStatus",
    "ExecMainCode",
    "NRestarts",
)
#: server_info keys returned in server_info_echo besides the config contract's (the echo_keys argument)
ECHO_KEYS = (
    "speculative_num_draft_tokens",
    "served_model_name",
    "model_path",
    "speculative_draft_model_path",
    "port",
    "version",
    "simulated",
    "max_total_num_tokens",
    "enable_deterministic_inference",
)


class NotReady(Exception):
    """The current phase has not succeeded yet."""


class EngineFailed(Exception):
    """The new invocation cannot become ready."""

    def __init__(self, reason, invocation_id=""):
        super().__init__(reason)
        self.reason = reason
        self.invocation_id = invocation_id


def start_monotonic(props, key="ExecMainStartTimestampMonotonic"):
    """A systemd *TimestampMonotonic (CLOCK_MONOTONIC, microseconds) as seconds, like time.monotonic()."""
    try:
        usec = int(props.get(key) or 0)
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None


def journal_command(unit, invocation_id, lines, since_epoch):
    """journalctl for one invocation's lines: the engine's own carry _SYSTEMD_INVOCATION_ID,
    systemd's about it INVOCATION_ID. Without an invocation (the start never happened) only
    the unit's lines since this wait began: never lines of an earlier run."""
    cmd = ["journalctl", "--no-pager", "-o", "short-iso", "-n", str(lines)]
    if invocation_id:
        return [*cmd, "_SYSTEMD_INVOCATION_ID=" + invocation_id, "+", "INVOCATION_ID=" + invocation_id]
    return [*cmd, "-u", unit, "--since", f"@{int(since_epoch)}"]


def read_api_key(path):
    """The bearer token from the unit's credential file ('' when there is none)."""
    if not path or not Path(path).exists():
        return ""
    with Path(path).open(encoding="utf-8") as fh:
        data = json.load(fh)
    return str(data.get("api_key") or "") if isinstance(data, dict) else ""


def normalize(value):
    """As repro_py.spec_config.echo_normal (tests hold the two to the same cases)."""
    if isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return int(value)
        if value == "":
            return None
    return value


def compare_echo(info, expect):
    """A message for every key of ``expect`` whose value ``/server_info`` (``info``) reports otherwise."""
    problems = []
    for key, want in sorted(expect.items()):
        got = info.get(key, "<missing>")
        if normalize(got) != normalize(want):
            problems.append(f"{key}: configured {want!r}, server reports {got!r}")
    return problems


def check_unit(props, state):
    """Raise EngineFailed/NotReady according to the unit's state; tracks the first new invocation."""
    inv = props.get("InvocationID", "")
    active = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    if state["require_new"] and (not inv or inv == state["previous"]):
        if active in ("failed", "inactive"):
            result = props.get("Result")
            hint = " (systemd refused the start: the start limit was hit)" if result == "start-limit-hit" else ""
            # the invocation in view is the previous one: its lines say nothing about this start
            raise EngineFailed(f"unit is {active}/{sub} and no new invocation started (Result={result}){hint}", "")
        raise NotReady("waiting for a new invocation")
    if state["invocation"] is None:
        state["invocation"] = inv
    elif inv != state["invocation"]:
        raise EngineFailed(
            f"the engine restarted during startup (invocation {state['invocation']} -> {inv}, "
            f"NRestarts={props.get('NRestarts')}): it exited",
            state["invocation"],
        )
    if active in ("failed", "inactive", "deactivating") or sub == "auto-restart":
        raise EngineFailed(
            f"the engine exited during startup: unit {active}/{sub}, Result={props.get('Result')}, "
            f"ExecMainCode={props.get('ExecMainCode')}, ExecMainStatus={props.get('ExecMainStatus')}",
            inv,
        )
