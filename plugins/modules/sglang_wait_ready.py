#!/usr/bin/python
# Ansible module layout: the documentation before the imports (ansible-test's validate-modules).
# ruff: noqa: E402
"""Wait until a freshly started SGLang unit is really serving (stdlib and Ansible's module_utils only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_wait_ready
short_description: Wait for a new SGLang server invocation to be ready and echo its config
description:
  - "Runs on the managed host and polls every O(poll_interval) seconds, in phases: the unit (C(systemctl show)) has
    a new InvocationID (unlike O(previous_invocation_id)), still active, no auto-restart; C(GET /health) returns 200
    (503 while loading, connection refused while the model loads); a one-token greedy C(POST /generate); a sampled
    generation; the config echo."
  - "The sampled generation is the OpenAI client's default request (C(POST /v1/chat/completions) with a model and
    messages and no sampling parameters, so sglang's temperature 1.0) bounded to 8 tokens, for every algorithm
    (DDTree included). sglang's warmup samples greedily, so this is the first request through the sampling kernels
    (for a speculative server the verify kernel C(tree_speculative_sampling_target_only), built just in time on a
    GPU host): a missing header or compiler fails here, not on a user's first request. It may take minutes."
  - "The config echo: C(GET /server_info) carries the O(expect) values (for the simulated engine also C(sim.pid)
    equal to the unit's MainPID); then the unit is read again: the same invocation must still run, so every answer
    came from the new process."
  - If the engine exits, it fails at once with the last journal lines of this invocation and the cause in plain
    words.
  - The API key is read on the host from O(api_key_file) (the unit's credential file, a JSON object with the key
    C(api_key)), so it never travels as a module argument; it is masked in the result.
  - "With O(sync_limit) it waits at most that long in this run and then, if not ready yet, returns RV(pending) and
    a RV(resume) state; the role goes on with the same module as a polled async job (O(resume)): a quick start
    costs one round trip, and a weight load of minutes never keeps one SSH session silent for longer."
  - In check mode nothing is probed (RV(skipped)).
author: The sglang-ddtree bundle maintainers (!UNKNOWN)
options:
  unit: {description: The systemd unit name., type: str, required: true}
  port: {description: The server's HTTP port., type: int, required: true}
  host: {description: The address the server is probed at., type: str, default: 127.0.0.1}
  previous_invocation_id: {description: The InvocationID seen before the start., type: str, default: ""}
  require_new_invocation:
    description: Demand an InvocationID different from O(previous_invocation_id) (false probes the running one).
    type: bool
    default: true
  timeout: {description: The seconds to wait for readiness., type: float, default: 1200}
  poll_interval: {description: The seconds between polls., type: float, default: 0.5}
  api_key_file:
    description: "The JSON file on the host holding the key as C(api_key) (absent or empty: no key is sent)."
    type: str
    default: ""
  expect: {description: The C(/server_info) keys and the values they must have., type: dict, default: {}}
  echo_keys:
    description: The contract's C(/server_info) keys to return too (C(echo_keys) of M(ddtree.sglang.ddtree_validate)).
    type: list
    elements: str
    default: []
  journal_lines: {description: The journal lines returned on failure., type: int, default: 40}
  sync_limit:
    description: "Return RV(pending) (with RV(resume)) when not ready after this many seconds (0: wait until ready
      or O(timeout))."
    type: float
    default: 0
  resume:
    description: The RV(resume) state of a pending run; go on waiting for the same start.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Wait until the new invocation is ready, generates (greedy and sampled) and echoes its config
  ddtree.sglang.sglang_wait_ready:
    unit: sglang
    port: 30001
    previous_invocation_id: "{{ stop.old_invocation_id }}"
    timeout: 1200
    api_key_file: /etc/sglang/sglang.keys.json
    expect: "{{ validated.echo }}"
    echo_keys: "{{ validated.echo_keys }}"
    sync_limit: 10
  register: ready_sync

- name: Go on waiting until the new invocation is ready (a polled async job)
  ddtree.sglang.sglang_wait_ready:
    unit: sglang
    port: 30001
    previous_invocation_id: "{{ stop.old_invocation_id }}"
    api_key_file: /etc/sglang/sglang.keys.json
    expect: "{{ validated.echo }}"
    resume: "{{ ready_sync.resume }}"
  when: ready_sync.pending | default(false)
  async: 1320
  poll: 5
"""

RETURN = r"""
ready: {description: Whether the server is ready., returned: when ready or pending, type: bool}
pending: {description: Not ready within O(sync_limit); go on with RV(resume)., returned: when pending, type: bool}
resume: {description: The state to pass as O(resume)., returned: when pending, type: dict}
phase:
  description: The phase the wait is in (pending) or failed in.
  returned: when pending or failed
  type: str
  choices: [unit, health, generate, sample, echo, ready]
waited_s: {description: The seconds waited since the wait began., returned: when ready or pending, type: float}
time_to_ready_s: {description: The seconds from the engine's start to ready., returned: when ready, type: float}
phases:
  description: The seconds into the wait at which each phase passed (C(<phase>_s)).
  returned: when ready
  type: dict
invocation_id: {description: The invocation that was probed (or failed)., returned: when ready or failed, type: str}
main_pid: {description: The unit's MainPID., returned: when ready, type: int}
server_info_echo:
  description: The C(/server_info) values of O(echo_keys) and the module's own keys (the simulated engine's C(sim)).
  returned: when ready
  type: dict
generation:
  description: "The greedy generation (text, completion_tokens) and the sampled one's text (sampled_text)."
  returned: when ready
  type: dict
skipped: {description: Nothing was probed (check mode)., returned: in check mode, type: bool}
reason: {description: The cause in plain words and the unit's state., returned: failure, type: str}
unit_state_reason: {description: The unit's state alone., returned: failure, type: str}
detection_s: {description: The seconds into the wait at which the failure was seen., returned: failure, type: float}
failed_after_start_s: {description: The seconds from the engine's start to the failure., returned: failure, type: float}
exit_to_detection_s: {description: The seconds from the engine's exit to the failure., returned: failure, type: float}
unit_state: {description: The unit's properties at the failure., returned: failure, type: dict}
journal: {description: The journal lines of the failed invocation., returned: failure, type: list, elements: str}
"""

import json
import subprocess
import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_failure import explain
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_host import unit_show
from ansible_collections.ddtree.sglang.plugins.module_utils.sglang_ready import (
    ECHO_KEYS,
    SHOW_PROPS,
    EngineFailed,
    NotReady,
    check_unit,
    compare_echo,
    journal_command,
    read_api_key,
    start_monotonic,
)


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


def http(method, url, api_key, body=None, timeout=30.0):
    """``(status, body bytes)`` of one request; an error status is an answer, no answer is NotReady."""
    data = None if body is None else json.dumps(body).encode()
    headers = {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    try:
        with open_url(url, data=data, headers=headers, method=method, timeout=timeout, use_netrc=False,
                      decompress=False) as resp:  # fmt: skip
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, UrlsConnectionError, ConnectionError, TimeoutError, OSError) as exc:
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


#: the phases of a wait, in order (DOCUMENTATION's description says what each checks)
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
        status = http("GET", self.base + "/health", self.api_key, timeout=self.limited(30.0))[0]
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
        final = unit_show(self.p["unit"], SHOW_PROPS)
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
            "unit_state": {k: props.get(k) for k in SHOW_PROPS},
            "journal": lines,
        }

    def ready(self):
        """What a wait that saw the engine ready returns: the time to ready, the phases, the echo."""
        props, info = self.props, self.info
        now = time.monotonic()
        started = start_monotonic(props)
        echo = {k: info.get(k) for k in (*self.p["echo_keys"], *ECHO_KEYS) if k in info}
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
            "echo_keys": {"type": "list", "elements": "str", "default": [], "no_log": False},
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
            wait.props = unit_show(p["unit"], SHOW_PROPS)
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
