"""Controller-side validation of the deployment inputs.

``ddtree_validate`` runs entirely on the controller: it never transfers or
executes a module, so a bad input is refused before any connection to the
host is opened. The speculative-decoding rules are those of
``repro_py.spec_config`` (the same rules the sweep planner and the simulated
engine use), so a configuration is accepted or refused with the same message
everywhere.

Arguments (all optional):

``read_vars`` a real boolean: read ``explicit`` and ``config`` from the play's
              variables by the contract's names (``spec_config.FIELDS``: each
              short key, each field's role variable), templated as Ansible
              templates a module argument, so no task spells the fields. Not
              together with ``explicit`` or ``config``.
``explicit``  short keys given on the command line (``-e budget=8``); a key
              whose value is undefined/None is treated as not given.
``config``    the role-variable values of the same short keys (inventory or
              role defaults). The keys the algorithm drops
              (``spec_config.dropped_keys``: the DDTree keys for
              ``algorithm=dflash``, every speculative key for ``algorithm=none``)
              are dropped from here: they are defaults, not a request.
``drafter_path``         draft model path for the engine flags.
``integers``  ``{name: {value, min, max}}`` further integer inputs (ports,
              parallel sizes); decimal strings are accepted, booleans refused.
``booleans``  ``{name: value}``: each must be a real boolean.
``choices``   ``{name: {value, allowed: [...]}}``.
``engine_choices`` ``{name: {value, choices, allow_empty}}``: ``choices`` names one of
              sglang 0.5.23's own lists (``attention_backend``, ``tool_call_parser``,
              ``reasoning_parser``; ``repro_py.simengine.sglang_choices``, checked
              against the wheel by the tests); ``allow_empty``: '' means "not set".
``exposure``  ``{host, api_key_set, key_problems, allow_unauthenticated}``: a bind
              address beyond loopback needs an API key unless explicitly allowed;
              ``key_problems`` names keys that are not one printable word. Only
              booleans and names travel here, never a key.

``faults``    the simulated faults, for the run label's suffix.

Precedence, applied here in one call: a short key given on the command line
(``explicit``) beats the role variable's value (``config``), wherever that
value came from (inventory, role default, or an extra var of the long name).

Returns ``config`` (normalized short keys), ``label`` (``spec_config.run_label``
with the faults), ``echo`` (``spec_config.expected_echo``: what /server_info
must report), ``echo_keys`` (every field's /server_info key, for the readiness
module's report, which cannot import the contract on the host), ``engine_flags``
(``to_engine_flags``), ``integers`` (normalized ints) and ``problems``.
"""

from __future__ import annotations

import ipaddress

from ansible.plugins.action import ActionBase
from ansible_collections.ddtree.sglang.plugins.plugin_utils.contract import LazyRepro, plain

spec_config = LazyRepro("repro_py.spec_config")
ARGUMENTS = ("read_vars", "explicit", "config", "drafter_path", "integers", "booleans", "choices", "engine_choices",
             "exposure", "faults")
sglang_choices = LazyRepro("repro_py.simengine.sglang_choices")


def engine_choices() -> dict[str, tuple[str, ...]]:
    """sglang 0.5.23's own lists an engine choice is checked against (``engine_choices``' ``choices``)."""
    return {
        "attention_backend": sglang_choices.ATTENTION_BACKENDS,
        "tool_call_parser": sglang_choices.TOOL_CALL_PARSERS,
        "reasoning_parser": sglang_choices.REASONING_PARSERS,
    }


def _given(value: object) -> bool:
    return value is not None


def merge_short_keys(explicit: dict[str, object], config: dict[str, object]) -> dict[str, object]:
    """Explicit short keys win; role-variable values fill in what the algorithm uses (``spec_config.dropped_keys``
    says what it does not; an unknown algorithm drops nothing, validate refuses it)."""
    unknown = sorted(set(explicit) - set(spec_config.SHORT_KEYS))
    raw: dict[str, object] = {k: v for k, v in explicit.items() if k in unknown}
    explicit = {k: v for k, v in explicit.items() if k in spec_config.SHORT_KEYS and _given(v)}
    algo = explicit.get("algorithm", config.get("algorithm", "ddtree"))
    algo_word = str(algo).strip().lower() if isinstance(algo, str) else algo
    dropped = spec_config.dropped_keys(algo_word) if algo_word in spec_config.ALGORITHMS else ()
    raw["algorithm"] = algo
    for key in (f.key for f in spec_config.SETTINGS):
        if key in explicit:
            raw[key] = explicit[key]
        elif key in config and key not in dropped:
            raw[key] = config[key]
    return raw


def contract_vars(task_vars: dict[str, object]) -> tuple[dict[str, object], dict[str, object]]:
    """``(explicit, config)`` from the play's variables, untemplated: each short key (an extra var such as
    ``-e budget=8``; undefined reads as not given) and each field's role variable that is defined."""
    explicit = {f.key: task_vars.get(f.key) for f in spec_config.FIELDS}
    config = {f.key: task_vars[f.role_var] for f in spec_config.FIELDS if f.role_var in task_vars}
    return explicit, config


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost; every other address or name reaches beyond this host."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problems(spec: dict[str, object]) -> list[str]:
    """Refuse a network-reachable server without an API key (unless allowed)."""
    problems = [str(p) for p in (spec.get("key_problems") or [])]
    host = str(spec.get("host") or "")
    allow, err = spec_config.parse_bool(
        "sglang_service_allow_unauthenticated_bind", spec.get("allow_unauthenticated", False)
    )
    if err:
        return [*problems, err]
    if not is_loopback(host) and spec.get("api_key_set") is not True and not allow:
        problems.append(
            f"sglang_service_host={host!r} is reachable beyond this host and no sglang_service_api_key is set: "
            "every endpoint, including admin ones such as /update_weights_from_disk, would be open to the network; "
            "set sglang_service_api_key (keep it in Ansible Vault), bind 127.0.0.1, or set "
            "sglang_service_allow_unauthenticated_bind: true"
        )
    return problems


def engine_choice_problems(checks: dict[str, object]) -> list[str]:
    problems = []
    for name, spec in checks.items():
        if not isinstance(spec, dict) or spec.get("choices") not in engine_choices():
            problems.append(f"{name}: engine choice check needs choices in {sorted(engine_choices())}")
            continue
        allowed = engine_choices()[str(spec["choices"])]
        value = spec.get("value")
        if value == "" and spec.get("allow_empty"):
            continue
        if value not in allowed:
            problems.append(f"{name}={value!r} is not one of sglang 0.5.23's choices; allowed: {', '.join(allowed)}")
    return problems


class ActionModule(ActionBase):
    """Validate inputs on the controller; never touches the managed host."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def _short_keys(self, args, task_vars):  # type: ignore[no-untyped-def]
        """``(explicit, config)``: the arguments, or with ``read_vars`` the play's variables templated (as Ansible
        templates a module's arguments); a message when they cannot be had."""
        read_vars = args.get("read_vars", False)
        if not isinstance(read_vars, bool):
            return f"read_vars={read_vars!r} must be a real boolean"
        if read_vars and ("explicit" in args or "config" in args):
            return "read_vars reads 'explicit' and 'config' from the play's variables; give either read_vars or them"
        if read_vars:
            explicit, config = (plain(self._templar.template(v)) for v in contract_vars(task_vars))
        else:
            explicit, config = args.get("explicit") or {}, args.get("config") or {}
        if not isinstance(explicit, dict) or not isinstance(config, dict):
            return "'explicit' and 'config' must be mappings"
        return explicit, config

    def run(self, tmp=None, task_vars=None):  # type: ignore[no-untyped-def]
        result = super().run(tmp, task_vars)
        args = {str(k): plain(v) for k, v in self._task.args.items()}
        problems: list[str] = []
        unknown = sorted(set(args) - set(ARGUMENTS))
        if unknown:
            msg = f"ddtree_validate: unknown argument(s) {', '.join(unknown)}; allowed: {', '.join(ARGUMENTS)}"
            return {**result, "failed": True, "msg": msg}

        short_keys = self._short_keys(args, task_vars or {})
        if isinstance(short_keys, str):
            return {**result, "failed": True, "msg": f"ddtree_validate: {short_keys}"}
        explicit, config = short_keys

        cfg = None
        try:
            cfg = spec_config.validate(merge_short_keys(explicit, config))
        except spec_config.SpecConfigError as exc:
            problems.extend(exc.problems)

        integers_out: dict[str, int] = {}
        for name, spec in (args.get("integers") or {}).items():
            if not isinstance(spec, dict) or "value" not in spec:
                problems.append(f"{name}: integer check needs {{value, min, max}}")
                continue
            number, err = spec_config.parse_int(
                name, spec["value"], minimum=int(spec.get("min", 0)), maximum=int(spec.get("max", 2**31 - 1))
            )
            if err:
                problems.append(err)
            elif number is not None:
                integers_out[name] = number

        for name, value in (args.get("booleans") or {}).items():
            err = spec_config.parse_bool(name, value)[1]
            if err:
                problems.append(err)

        for name, spec in (args.get("choices") or {}).items():
            allowed = list(spec.get("allowed") or [])
            value = spec.get("value")
            if value not in allowed:
                problems.append(f"{name}={value!r} is not allowed; allowed: {', '.join(map(str, allowed))}")

        problems.extend(engine_choice_problems(args.get("engine_choices") or {}))
        if args.get("exposure") is not None:
            problems.extend(exposure_problems(args["exposure"] or {}))

        if problems:
            result.update(
                failed=True,
                problems=problems,
                msg="invalid input (refused on the controller before contacting the host): " + "; ".join(problems),
            )
            return result

        if cfg is None:  # spec_config.validate returns a config or raises with its problems
            result.update(failed=True, msg="ddtree_validate: spec_config.validate returned no config and no problem")
            return result
        drafter_path = args.get("drafter_path")
        faults = args.get("faults") or []
        label = spec_config.run_label(cfg, faults if isinstance(faults, (list, str)) else [])
        result.update(
            changed=False,
            config=cfg.as_short(),
            label=label,
            echo=spec_config.expected_echo(cfg),
            echo_keys=[f.echo for f in spec_config.FIELDS],
            engine_flags=spec_config.to_engine_flags(cfg, drafter_path=drafter_path or None),
            integers=integers_out,
            # sglang 0.5.23's --attention-backend choices: the restart chain names the ones the GPUs can run
            attention_backends=list(sglang_choices.ATTENTION_BACKENDS),
            problems=[],
            msg=f"valid: {label}",
        )
        return result
