"""The follow-up commands a tuning run prints (resume, write the winner back) and the settings they keep.

A printed command must do what the run did when run as printed: on the same
reconfigurer (a run on the local simulated engine resumed without
``--reconfigurer local`` would take a host lease through Ansible instead), with
the same extra vars and host. ``tune/settings.json`` stores them, and
``--resume`` reads them from there; the printed command names them too, so it
says what it will do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

RECONFIGURERS = ("ansible", "local")
DEFAULT_RECONFIGURER = "ansible"


def extra_var_text(key: str, value: object) -> str:
    """``KEY=VALUE`` that ``-e`` parses back (YAML) to ``value``."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value:
                return f"{key}={value}"
        except yaml.YAMLError:
            pass
    return f"{key}={json.dumps(value)}"


def run_options(settings: Mapping[str, Any]) -> list[str]:
    """The options that keep a run's reconfigurer, extra vars and host (from its stored settings)."""
    out: list[str] = []
    if (settings.get("reconfigurer") or DEFAULT_RECONFIGURER) != DEFAULT_RECONFIGURER:
        out += ["--reconfigurer", str(settings["reconfigurer"])]
    for key, value in (settings.get("extra_vars") or {}).items():
        out += ["-e", extra_var_text(str(key), value)]
    if settings.get("limit_hosts"):
        out += ["--limit-hosts", str(settings["limit_hosts"])]
    return out


def resolve_run_settings(
    given_reconfigurer: str | None,
    given_extra_vars: Mapping[str, object],
    given_limit: str | None,
    stored: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[str]]:
    """The reconfigurer, extra vars and host limit of a run, and the problems with what was given.

    A new run takes what was given. A resumed run takes what it stored; given values must match them
    (a run is not continued on another reconfigurer, with other extra vars or on another host). Extra vars
    are refused with the local reconfigurer: no play runs there, so they could not apply."""
    problems: list[str] = []
    if stored is None:
        chosen = {
            "reconfigurer": given_reconfigurer or DEFAULT_RECONFIGURER,
            "extra_vars": dict(given_extra_vars),
            "limit_hosts": given_limit,
        }
    else:
        chosen = {
            "reconfigurer": str(stored.get("reconfigurer") or DEFAULT_RECONFIGURER),
            "extra_vars": dict(stored.get("extra_vars") or {}),
            "limit_hosts": stored.get("limit_hosts"),
        }
        for name, given, flag in (
            ("reconfigurer", given_reconfigurer, "--reconfigurer"),
            ("extra_vars", dict(given_extra_vars) or None, "extra vars (-e)"),
            ("limit_hosts", given_limit, "--limit-hosts"),
        ):
            if given is not None and given != chosen[name]:
                problems.append(
                    f"--resume: the run was made with {flag} {_shown(chosen[name])}; {flag} {_shown(given)} "
                    "differs (start a new run for other settings)"
                )
    if chosen["reconfigurer"] == "local" and chosen["extra_vars"]:
        keys = ", ".join(sorted(chosen["extra_vars"]))
        problems.append(
            f"-e/--extra-var {keys}: extra vars go to the reconfigure play, and --reconfigurer local runs none "
            "(the local engine takes sglang_service_sim_* from the inventory); set them in the inventory, or "
            "use --reconfigurer ansible"
        )
    return chosen, problems


def _shown(value: object) -> str:
    if isinstance(value, Mapping):
        return " ".join(extra_var_text(str(k), v) for k, v in value.items()) or "(none)"
    return "(none)" if value is None else str(value)
