"""An inventory's values for the controller tools, resolved by Ansible itself.

``ansible-inventory --list`` does not template: a value such as
``sglang_service_api_key: "{{ vault_sglang_service_api_key | default('') }}"``
comes out as that text, and a client sending it gets 401. Here the values come
from ``playbooks/tool_values.yml``, run through ansible-runner on the controller
(no connection to any host) with the tool's inventories, limit, extra vars and
vault options: every value templated and decrypted with ansible-core's own
precedence, the sglang_service role's defaults and vars included, exactly what
the tool's plays will see. The play writes them into a private 0700 directory
as 0600 files, read here and removed with it.

A value that cannot be resolved (an undefined variable inside it, a vault value
or file without its password) is refused before anything runs, naming the
variable and the inventory file that sets it. The API keys never reach a message:
the play's output and errors are scrubbed of them, and :class:`HostValues` does
not print them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from repro_py.ansibleaccess import AnsibleAccess, runner_env
from repro_py.spec_config import ROLE_VARS

BUNDLE = Path(__file__).resolve().parents[1]
PLAYBOOK = "playbooks/tool_values.yml"

#: Every variable a controller tool reads from an inventory (the sweep, the tuner, gates and bench with
#: ``--inventory``); ``tests/sweep/test_inventory_values.py`` checks that the code reads no other.
TOOL_VARS: tuple[str, ...] = (
    # where the server is and how to reach it
    "ansible_connection",
    "ansible_host",
    "sglang_service_host",
    "sglang_service_port",
    "sglang_service_served_model_name",
    "sglang_service_api_key",
    "sglang_service_admin_api_key",
    "sweep_endpoint_url",
    "sweep_endpoint_host",
    # the engine and its unit
    "sglang_service_engine",
    "sglang_service_name",
    "sglang_service_sim_load_seconds",
    "sglang_service_sim_warmup_seconds",
    "sglang_service_sim_speed",
    # what the sweep and the tuner plan from
    "sweep_grid",
    "sweep_bench",
    "sweep_default_config",
    "sweep_drafter_block_size",
    "sweep_load_time_s",
    "sweep_cell_time_s",
    "sweep_gates_time_s",
    "sweep_lock_file",
    "sglang_version",
    "sglang_service_allow_block_mismatch",
    "tune_space",
    # the config the inventory runs now (the tuner's write-back compares with it)
    *ROLE_VARS.values(),
)
SECRET_VARS: tuple[str, ...] = ("sglang_service_api_key", "sglang_service_admin_api_key")
VAULT_HINT = "pass --vault-password-file FILE, --vault-id ID or --ask-vault-pass, or set ANSIBLE_VAULT_PASSWORD_FILE"
_KEYISH = re.compile(r"((?:api_key|password|secret)[\w\"']*\s*[:=]\s*)\S+", re.IGNORECASE)


class InventoryError(ValueError):
    """The inventory cannot be resolved; ``problems`` names each variable or file and why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclasses.dataclass(frozen=True)
class HostValues:
    """One host's resolved values (the keys among them; ``repr`` never shows a value)."""

    host: str
    values: Mapping[str, Any] = dataclasses.field(repr=False)

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def public(self) -> dict[str, Any]:
        """Every value but the keys."""
        return {k: v for k, v in self.values.items() if k not in SECRET_VARS}


# ---------------------------------------------------------------- where a variable is set


class _AnyTagLoader(yaml.SafeLoader):
    """YAML with Ansible's tags (``!vault``, ``!unsafe``) read as plain scalars."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, _suffix, node: loader.construct_scalar(node))


def _var_files(inventory: Path) -> list[Path]:
    base = inventory if inventory.is_dir() else inventory.parent
    files = [inventory] if inventory.is_file() else sorted(p for p in inventory.iterdir() if p.is_file())
    for sub in ("group_vars", "host_vars"):
        if (base / sub).is_dir():
            files += sorted(p for p in (base / sub).rglob("*") if p.is_file())
    return files


def _is_vault_file(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(14) == b"$ANSIBLE_VAULT"
    except OSError:
        return False


def _has_key(doc: object, name: str) -> bool:
    if isinstance(doc, Mapping):
        return name in doc or any(_has_key(v, name) for v in doc.values())
    if isinstance(doc, list):
        return any(_has_key(v, name) for v in doc)
    return False


def defined_in(inventories: Iterable[Path], name: str) -> list[Path]:
    """The inventory files that set ``name`` (read as YAML; vault-encrypted files cannot be searched)."""
    out: list[Path] = []
    for inventory in inventories:
        for path in _var_files(inventory):
            if _is_vault_file(path):
                continue
            try:
                doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_AnyTagLoader)
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue
            if _has_key(doc, name):
                out.append(path)
    return out


def unparsable_files(inventories: Iterable[Path]) -> list[str]:
    """Variable files that are not YAML, each with the parser's complaint."""
    out: list[str] = []
    for path in (p for inv in inventories for p in _var_files(inv) if not _is_vault_file(p)):
        try:
            yaml.load(path.read_text(encoding="utf-8"), Loader=_AnyTagLoader)
        except (OSError, UnicodeDecodeError) as exc:
            out.append(f"{path}: {exc}")
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            out.append(f"{path}" + (f" line {mark.line + 1}" if mark is not None else "") + " is not valid YAML")
    return out


def vault_files(inventories: Iterable[Path]) -> list[Path]:
    """Fully vault-encrypted files among the inventories' variable files."""
    return [p for inv in inventories for p in _var_files(inv) if _is_vault_file(p)]


# ---------------------------------------------------------------- messages


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secrets and without the value of anything that looks like a key."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "<redacted>")
    return _KEYISH.sub(r"\1<redacted>", text)


def _where(inventories: Sequence[Path], name: str) -> str:
    files = defined_in(inventories, name)
    if files:
        return "set in " + ", ".join(str(p) for p in files)
    encrypted = vault_files(inventories)
    if encrypted:
        return "not found in a readable file of " + ", ".join(map(str, inventories)) + " (vault-encrypted: " + (
            ", ".join(map(str, encrypted)) + ")"
        )
    return "in " + ", ".join(map(str, inventories))


def variable_problem(inventories: Sequence[Path], name: str, why: str) -> str:
    hint = f"; {VAULT_HINT}" if "decrypt" in why.lower() else ""
    return f"{name} cannot be resolved ({_where(inventories, name)}): {why}{hint}"


def play_problems(inventories: Sequence[Path], output: str, access: AnsibleAccess) -> list[str]:
    """What a failed resolution play said (its error lines), with the vault files named when it was the vault."""
    lines = [ln.strip() for ln in output.splitlines()]
    errors = [ln for ln in lines if ln.startswith(("[ERROR]", "ERROR!", "fatal:"))] or [ln for ln in lines if ln][-3:]
    text = " ".join(errors)
    problems = [scrub(" ".join(e.split())) for e in errors]
    if "yaml" in text.lower():
        problems += unparsable_files(inventories)
    if "decrypt" in text.lower():
        encrypted = vault_files(inventories)
        what = ", ".join(map(str, encrypted)) if encrypted else "a vault-encrypted value of " + ", ".join(
            map(str, inventories)
        )
        problems.append(f"{what} cannot be decrypted with {access.describe()}: {VAULT_HINT}")
    return problems or ["the resolution play failed without a message"]


# ---------------------------------------------------------------- resolve


def _read_values(out_dir: Path, inventories: Sequence[Path]) -> dict[str, HostValues]:
    hosts: dict[str, HostValues] = {}
    problems: list[str] = []
    for path in sorted(out_dir.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        host = path.stem
        for name, why in sorted((doc.get("errors") or {}).items()):
            problems.append(f"{host}: " + variable_problem(inventories, name, why))
        hosts[host] = HostValues(host, dict(doc.get("values") or {}))
    if problems:
        raise InventoryError(problems)
    return hosts


def resolve(
    inventories: Sequence[Path],
    *,
    bundle: Path = BUNDLE,
    limit: str | None = None,
    access: AnsibleAccess | None = None,
    extra_vars: Mapping[str, object] | None = None,
    names: Sequence[str] = TOOL_VARS,
) -> dict[str, HostValues]:
    """Each matched host's values of ``names``, as the tools' plays will see them. Refused:
    :class:`InventoryError` naming each variable (and its file) or the play's own error."""
    # the interface module's own run: tests that stand in for the tools' plays (ansible_runner.run) still
    # resolve their inventories with Ansible itself
    from ansible_runner.interface import run as run_play  # noqa: PLC0415 (heavy; only when really used)

    access = access or AnsibleAccess()
    invs = [Path(p) for p in inventories]
    with tempfile.TemporaryDirectory(prefix="sglang-tool-values-") as private:  # 0700
        out_dir = Path(private) / "values"
        out_dir.mkdir(mode=0o700)
        (Path(private) / "runner").mkdir(mode=0o700)
        result = run_play(
            private_data_dir=str(Path(private) / "runner"),
            project_dir=str(bundle),
            playbook=str(bundle / PLAYBOOK),
            inventory=[str(p.resolve()) for p in invs],
            limit=limit,
            extravars={
                **dict(extra_vars or {}),
                "_sglang_service_tool_values_dir": str(out_dir),
                "_sglang_service_tool_value_names": list(names),
                "_sglang_service_tool_secret_names": list(SECRET_VARS),
            },
            envvars={**runner_env(bundle), "ANSIBLE_NOCOLOR": "1"},
            quiet=True,
            rotate_artifacts=0,
            **access.runner_kwargs(),
        )
        output = result.stdout.read() if result.stdout is not None else ""
        hosts = _read_values(out_dir, invs)
        if result.rc != 0:
            secrets = [str(h.get(n) or "") for h in hosts.values() for n in SECRET_VARS]
            raise InventoryError([scrub(p, secrets) for p in play_problems(invs, output, access)])
    return hosts
