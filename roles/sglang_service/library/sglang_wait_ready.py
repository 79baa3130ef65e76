#!/usr/bin/python3
"""Wait until a freshly started SGLang unit is really serving (stdlib only).

Runs on the managed host. Polls every ``poll_interval`` seconds:

1. the unit (``systemctl show``): a new InvocationID (different from the one
   recorded before the start), still active, no auto-restart. If the engine
   exits, it fails at once with the last journal lines of THIS invocation;
2. ``GET /health`` returns 200 (503 while loading/warming; connection refused
   while the model loads, since nothing listens then);
3. a real one-token generation (``POST /generate``, max_new_tokens 1, greedy);
4. a sampled generation, for every algorithm (DDTree included): the OpenAI
   client's default request (``POST /v1/chat/completions`` with a model and
   messages and no sampling parameters, so sglang's temperature 1.0), bounded
   to 8 tokens, must generate. sglang's warmup samples greedily, so this is the
   first request through the sampling kernels (FlashInfer's, and for a
   speculative server the verify kernel ``tree_speculative_sampling_target_only``:
   built just in time on a GPU host; a missing header or compiler fails here,
   not on a user's first request). It may take minutes;
5. the config echo: ``GET /server_info`` carries the expected speculative
   settings (and, for the simulated engine, ``sim.pid`` equals the unit's MainPID).

The API key is read on the host from ``api_key_file`` (the unit's credential
file, JSON ``{"api_key": ...}``), so it never travels as a module argument.

After the echo it re-reads the unit: the same invocation must still be running,
so every answer came from the new process.

With ``sync_limit`` it waits at most that long in this run and then, if not
ready yet, returns ``pending`` and a ``resume`` state (the invocation seen,
when the wait began); the role goes on with the same module as a polled async
job (``resume``): a quick start costs one round trip, and a weight load of
minutes never keeps one SSH session silent for longer than ``sync_limit``.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_failure import explain
from ansible.module_utils.sglang_host import unit_show

DOCUMENTATION = r"""
module: sglang_wait_ready
short_description: Wait for a new SGLang server invocation to be ready and echo its config
description:
  - Polls systemd, /health, a one-token /generate and /server_info; fails within seconds if the engine exits.
options:
  unit: {description: systemd unit name, type: str, required: true}
  port: {description: HTTP port, type: int, required: true}
  host: {description: address to probe, type: str, default: 127.0.0.1}
  previous_invocation_id: {description: InvocationID seen before the start, type: str, default: ""}
  require_new_invocation:
    description: demand an InvocationID different from previous_invocation_id
    type: bool
    default: true
  timeout: {description: seconds to wait for readiness, type: float, default: 1200}
  poll_interval: {description: seconds between polls, type: float, default: 0.5}
  api_key_file:
    description: "JSON file on the host holding {api_key: ...}; absent or empty: no key"
    type: str
    default: ""
  expect: {description: server_info keys and the values they must have, type: dict, default: {}}
  journal_lines: {description: journal lines returned on failure, type: int, default: 40}
  sync_limit:
    description: "return pending (with resume) when not ready after this many seconds; 0: wait until ready or timeout"
    type: float
    default: 0
  resume: {description: "the resume state of a pending run: go on waiting for the same start", type: dict, default: {}}
author: [sglang-ddtree deploy]
"""

_SHOW_PROPS = (
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
_ECHO_KEYS = (
    "speculative_algorithm",
    "speculative_ddtree_budget",
    "speculative_ddtree_topk_cap",
    "speculative_dflash_block_size",
    "speculative_draft_window_size",
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


def journal(unit, invocation_id, lines, since_epoch):
    """Last journal lines of one invocation; waits (bounded) until journald has caught up."""
    cmd = journal_command(unit, invocation_id, lines, since_epoch)
    previous = None
    deadline = time.monotonic() + 3.0
    text = ""
    while True:
        text = subprocess.run(cmd, check=False, capture_output=True, text=True).stdout
        if text == previous or time.monotonic() > deadline:
            break
        previous = text
        time.sleep(0.25)
    out = [ln for ln in text.splitlines() if ln and not ln.startswith("-- ")]
    if not out and invocation_id:
        # nothing under that invocation yet: the unit's own lines since this wait began
        fallback = journal_command(unit, "", lines, since_epoch)
        text = subprocess.run(fallback, check=False, capture_output=True, text=True).stdout
        out = [ln for ln in text.splitlines() if ln and not ln.startswith("-- ")]
    return out


def read_api_key(path):
    """The bearer token from the unit's credential file ('' when there is none)."""
    if not path or not Path(path).exists():
        return ""
    with Path(path).open(encoding="utf-8") as fh:
        data = json.load(fh)
    return str(data.get("api_key") or "") if isinstance(data, dict) else ""


def http(method, url, api_key, body=None, timeout=30.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if api_key:
        req.add_header("Authorization", "Bearer " + api_key)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
        raise NotReady(f"{method} {url}: {exc}") from exc


#: The OpenAI client's default chat request (no temperature, top_p or top_k: sglang's 1.0, 1.0, -1),
#: bounded to 8 tokens (unbounded, it would generate to the end of the context).
SAMPLED_MESSAGES = [{"role": "user", "content": "Name three prime numbers."}]
SAMPLED_MAX_TOKENS = 8
SAMPLED_WHAT = "a sampled generation (the OpenAI client's default request: no temperature, sglang's 1.0)"


def sampled_generation(base, api_key, timeout, invocation, model="default"):
    """The OpenAI client's default request, sampled; its text, or EngineFailed with what the server said.

    Every algorithm must serve it (a DDTree server verifies it with target-only tree sampling).
    sglang's warmup generates greedily, so on a GPU host this is the first request through the
    sampling kernels (built just in time: a missing header or compiler fails here, at deploy
    time, not on a user's first request).
    """
    body = {"model": model, "messages": SAMPLED_MESSAGES, "max_tokens": SAMPLED_MAX_TOKENS}
    status, raw = http("POST", base + "/v1/chat/completions", api_key, body=body, timeout=timeout)
    if status != 200:
        raise EngineFailed(f"{SAMPLED_WHAT} failed: /v1/chat/completions returned {status}: {raw[:300]!r}", invocation)
    try:
        reply = json.loads(raw or b"{}")
        message = reply["choices"][0]["message"]
        tokens = int((reply.get("usage") or {}).get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EngineFailed(f"{SAMPLED_WHAT} returned no message ({exc}): {raw[:300]!r}", invocation) from exc
    if tokens < 1:
        raise EngineFailed(f"{SAMPLED_WHAT} generated no token: {raw[:300]!r}", invocation)
    return (message.get("content") or "") or (message.get("reasoning_content") or "")


def normalize(value):
    """As repro_py.spec_config.echo_normal (tests hold the two to the same cases)."""
    if isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return int(value)
        if value == "":
            return None
    return value


def compare_echo(info, expect):
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


#: the phases of a wait, in order (the module docstring says what each checks)
_PHASES = ("unit", "health", "generate", "sample", "echo", "ready")


class Readiness:
    """One wait for a started unit: the phase it is in, what each phase passed saw, and its clocks (a resumed
    wait keeps the first part's)."""

    def __init__(self, p, api_key):
        self.p, self.api_key = p, api_key
        self.base = f"http://{p['host']}:{p['port']}"
        resume = p["resume"]
        self.t0 = time.monotonic() - (max(0.0, time.time() - float(resume["t0_epoch"])) if resume else 0.0)
        self.began_epoch = float(resume["began_epoch"]) if resume else time.time() - 1.0
        self.deadline = self.t0 + p["timeout"]
        self.sync_end = time.monotonic() + p["sync_limit"] if p["sync_limit"] > 0 else None
        self.state = {
            "require_new": p["require_new_invocation"],
            "previous": p["previous_invocation_id"],
            "invocation": resume.get("invocation") or None,  # a restart after the first part saw it still fails
        }
        self.phase, self.phases, self.last_wait = "unit", {}, ""
        self.props, self.generation, self.info = {}, None, {}

    def limited(self, seconds):
        """A request's timeout, no longer than what is left of the sync limit (a timeout is "not yet")."""
        return seconds if self.sync_end is None else min(seconds, max(1.0, self.sync_end - time.monotonic()))

    def elapsed(self):
        return round(time.monotonic() - self.t0, 3)

    def advance(self):
        """Pass the phases from the current one on; NotReady where one has not succeeded yet."""
        while self.phase != "ready":
            if self.phase != "unit":  # the unit itself is checked on every poll (check_unit), before the phases
                getattr(self, "_" + self.phase)()
            self.phases[self.phase + "_s"] = self.elapsed()
            self.phase = _PHASES[_PHASES.index(self.phase) + 1]

    def _health(self):
        status, _ = http("GET", self.base + "/health", self.api_key, timeout=self.limited(30.0))
        if status != 200:
            raise NotReady(f"/health returned {status}")

    def _generate(self):
        body = {"text": "The capital city of France is", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
        status, raw = http("POST", self.base + "/generate", self.api_key, body=body, timeout=self.limited(60.0))
        if status != 200:
            raise NotReady(f"/generate returned {status}: {raw[:200]!r}")
        reply = json.loads(raw or b"{}")
        if "text" not in reply:
            raise NotReady(f"/generate reply has no text: {raw[:200]!r}")
        tokens = (reply.get("meta_info") or {}).get("completion_tokens")
        self.generation = {"text": reply["text"], "completion_tokens": tokens}

    def _sample(self):
        # the first sampled request may build the sampling kernels: allow the rest of the budget
        # (within a sync_limit: no longer than it; the async part goes on)
        budget = self.limited(max(60.0, self.deadline - time.monotonic()))
        model = self.p["expect"].get("served_model_name") or "default"
        invocation = self.state["invocation"]
        self.generation["sampled_text"] = sampled_generation(self.base, self.api_key, budget, invocation, model)

    def _echo(self):
        status, raw = http("GET", self.base + "/server_info", self.api_key, timeout=self.limited(30.0))
        if status != 200:
            raise NotReady(f"/server_info returned {status}")
        self.info = info = json.loads(raw or b"{}")
        problems = compare_echo(info, self.p["expect"])
        if problems:
            raise EngineFailed("config echo check failed: " + "; ".join(problems), self.state["invocation"])
        if info.get("simulated") is True:
            sim_pid = (info.get("sim") or {}).get("pid")
            main_pid = int(self.props.get("MainPID") or 0)
            if sim_pid != main_pid:
                raise NotReady(f"server pid {sim_pid} is not the unit's MainPID {main_pid}")
        final = unit_show(self.p["unit"], _SHOW_PROPS)
        check_unit(final, self.state)
        self.props = final

    def pending(self):
        """What a wait that ran out of its sync limit returns: how to resume it."""
        resume = {
            "invocation": self.state["invocation"] or "",
            "began_epoch": self.began_epoch,
            "t0_epoch": time.time() - (time.monotonic() - self.t0),
        }
        return {"changed": False, "ready": False, "pending": True, "phase": self.phase, "waited_s": self.elapsed(),
                "resume": resume}  # fmt: skip

    def failure(self, exc):
        """What a failed wait returns: the reason with this invocation's journal, and how long detection took."""
        p, props = self.p, self.props
        now = time.monotonic()
        detected = round(now - self.t0, 3)
        started = start_monotonic(props)
        exited = start_monotonic(props, "ExecMainExitTimestampMonotonic")
        lines = journal(p["unit"], exc.invocation_id, p["journal_lines"], self.began_epoch)
        reason = explain(exc.reason, lines)
        return {
            "msg": f"{p['unit']}: {reason}",
            "reason": reason,
            "unit_state_reason": exc.reason,
            "phase": self.phase,
            "detection_s": detected,
            "failed_after_start_s": round(now - started, 3) if started else None,
            "exit_to_detection_s": round(now - exited, 3) if exited and started and exited >= started else None,
            "invocation_id": exc.invocation_id,
            "unit_state": {k: props.get(k) for k in _SHOW_PROPS},
            "journal": lines,
        }

    def ready(self):
        """What a wait that saw the engine ready returns: the time to ready, the phases, the echo."""
        props, info = self.props, self.info
        now = time.monotonic()
        started = start_monotonic(props)
        echo = {k: info.get(k) for k in _ECHO_KEYS if k in info}
        if isinstance(info.get("sim"), dict):
            echo["sim"] = {k: info["sim"].get(k) for k in ("pid", "speed", "faults") if k in info["sim"]}
        return {
            "changed": False,
            "ready": True,
            "time_to_ready_s": round(now - started, 3) if started else None,
            "waited_s": self.elapsed(),
            "phases": self.phases,
            "invocation_id": props.get("InvocationID"),
            "main_pid": int(props.get("MainPID") or 0),
            "server_info_echo": echo,
            "generation": self.generation,
        }


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "host": {"type": "str", "default": "127.0.0.1"},
            "previous_invocation_id": {"type": "str", "default": ""},
            "require_new_invocation": {"type": "bool", "default": True},
            "timeout": {"type": "float", "default": 1200.0},
            "poll_interval": {"type": "float", "default": 0.5},
            "api_key_file": {"type": "str", "default": ""},
            "expect": {"type": "dict", "default": {}},
            "journal_lines": {"type": "int", "default": 40},
            "sync_limit": {"type": "float", "default": 0.0},
            "resume": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: readiness not probed")

    try:
        api_key = read_api_key(p["api_key_file"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the API key file {p['api_key_file']}: {exc}")
    if api_key:
        module.no_log_values.add(api_key)  # masked in anything this module returns
    wait = Readiness(p, api_key)
    try:
        while True:
            wait.props = unit_show(p["unit"], _SHOW_PROPS)
            check_unit(wait.props, wait.state)
            try:
                wait.advance()
                break
            except NotReady as exc:
                wait.last_wait = str(exc)
            if time.monotonic() > wait.deadline:
                raise EngineFailed(
                    f"not ready after {p['timeout']:.0f} s (phase {wait.phase}; last: {wait.last_wait or 'n/a'})",
                    wait.state["invocation"] or wait.props.get("InvocationID", ""),
                )
            if wait.sync_end is not None and time.monotonic() > wait.sync_end:
                module.exit_json(**wait.pending())
            time.sleep(p["poll_interval"])
    except EngineFailed as exc:
        module.fail_json(**wait.failure(exc))
    module.exit_json(**wait.ready())


if __name__ == "__main__":
    main()
