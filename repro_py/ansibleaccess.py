"""How the tools open an inventory and run plays as ``ansible-playbook`` would: vault secrets, become password.

The options are ansible-playbook's own and mean the same: ``--vault-password-file FILE``
and ``--vault-id [LABEL@]SOURCE`` (repeatable), ``--ask-vault-pass`` (``-J``),
``--ask-become-pass`` (``-K``); ``ANSIBLE_VAULT_PASSWORD_FILE`` and every other
``ANSIBLE_*`` setting reach the plays through the environment. They go to every
play a tool runs through ansible-runner (:meth:`AnsibleAccess.runner_kwargs`).

A password asked for (``--ask-vault-pass``, ``--vault-id LABEL@prompt``,
``--ask-become-pass``) is asked once, on the terminal, and given to each play's
own prompt through ansible-runner's pexpect answers: it is never on a command
line (``ps``), in an environment variable, in a file or in a log.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: ansible-playbook's prompts (lib/ansible/cli/__init__.py: ``Vault password: ``,
#: ``Vault password (LABEL): ``, ``BECOME password: ``).
VAULT_PROMPT = "Vault password: "
BECOME_PROMPT = "BECOME password: "


def vault_prompt(label: str) -> str:
    return f"Vault password ({label}): "


def _prompt_pattern(prompt: str) -> str:
    return r"^" + re.escape(prompt.rstrip()) + r"\s*$"


class AccessError(ValueError):
    """An option that cannot work (a password file that does not exist); the message names it."""


@dataclasses.dataclass(frozen=True)
class AnsibleAccess:
    """Vault and become options for every play a tool runs (ansible-playbook's own meaning)."""

    vault_password_files: tuple[str, ...] = ()
    vault_ids: tuple[str, ...] = ()
    ask_vault_pass: bool = False
    ask_become_pass: bool = False
    #: prompt text -> answer, asked once on the terminal (never printed: repr=False)
    answers: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def prompts(self) -> list[str]:
        """The prompts ansible-playbook shows for these options, in its order."""
        out = [VAULT_PROMPT] if self.ask_vault_pass else []
        for vault_id in self.vault_ids:
            label, sep, source = vault_id.partition("@")
            if sep and source == "prompt":
                out.append(vault_prompt(label))
        if self.ask_become_pass:
            out.append(BECOME_PROMPT)
        return out

    def cmdline(self) -> str:
        """The ansible-playbook options (file paths and ids only; never a password)."""
        return shlex.join(self.args())

    def args(self) -> list[str]:
        """The options as arguments (file paths and ids only; never a password)."""
        args: list[str] = []
        for path in self.vault_password_files:
            args += ["--vault-password-file", path]
        for vault_id in self.vault_ids:
            args += ["--vault-id", vault_id]
        if self.ask_vault_pass:
            args.append("--ask-vault-pass")
        if self.ask_become_pass:
            args.append("--ask-become-pass")
        return args

    def runner_kwargs(self) -> dict[str, Any]:
        """``ansible_runner.run`` keyword arguments: the options, and the answers to their prompts."""
        out: dict[str, Any] = {}
        line = self.cmdline()
        if line:
            out["cmdline"] = line
        if self.answers:
            out["passwords"] = {_prompt_pattern(prompt): answer for prompt, answer in self.answers.items()}
        return out

    def with_answers(self, ask: Callable[[str], str] = getpass.getpass) -> AnsibleAccess:
        """The same options with every prompt answered once (``ask`` shows the prompt; the terminal by default)."""
        answers = {prompt: self.answers.get(prompt) or ask(prompt) for prompt in self.prompts()}
        return dataclasses.replace(self, answers=answers)

    def check(self) -> None:
        """Refuse what cannot work before any play runs: a password file or ``@file`` source that is missing."""
        files = [*self.vault_password_files]
        files += [vid.partition("@")[2] for vid in self.vault_ids if vid.partition("@")[2] not in ("", "prompt")]
        files += [vid for vid in self.vault_ids if "@" not in vid and vid != "prompt"]
        env_file = os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE")
        if env_file:
            files.append(env_file)
        for name in files:
            path = Path(name).expanduser()
            if not path.exists():
                raise AccessError(f"vault password file {name} does not exist")
        if self.prompts() and not self.answers and not sys.stdin.isatty():
            raise AccessError(
                f"{', '.join(p.strip() for p in self.prompts())} asked for, but there is no terminal to ask on: "
                "use --vault-password-file FILE (or ANSIBLE_VAULT_PASSWORD_FILE) instead"
            )

    def describe(self) -> str:
        """For messages: which vault sources are in effect (names only)."""
        sources = [f"--vault-password-file {p}" for p in self.vault_password_files]
        sources += [f"--vault-id {v}" for v in self.vault_ids]
        if self.ask_vault_pass:
            sources.append("--ask-vault-pass")
        if os.environ.get("ANSIBLE_VAULT_PASSWORD_FILE"):
            sources.append(f"ANSIBLE_VAULT_PASSWORD_FILE={os.environ['ANSIBLE_VAULT_PASSWORD_FILE']}")
        return ", ".join(sources) if sources else "no vault password given"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """ansible-playbook's vault and become options, with its names and meaning."""
    group = parser.add_argument_group("vault and become (as ansible-playbook takes them)")
    group.add_argument("--vault-password-file", action="append", default=[], metavar="FILE",
                       help="vault password file (repeatable); ANSIBLE_VAULT_PASSWORD_FILE works too")
    group.add_argument("--vault-id", action="append", default=[], metavar="ID",
                       help="vault identity [LABEL@]SOURCE (repeatable); SOURCE 'prompt' asks once")
    group.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the vault password once")
    group.add_argument("-K", "--ask-become-pass", action="store_true",
                       help="ask for the sudo password once (plays become root; needed unless sudo is password-less)")


def from_args(args: argparse.Namespace) -> AnsibleAccess:
    return AnsibleAccess(
        vault_password_files=tuple(args.vault_password_file),
        vault_ids=tuple(args.vault_id),
        ask_vault_pass=bool(args.ask_vault_pass),
        ask_become_pass=bool(args.ask_become_pass),
    )


def runner_env(bundle: Path) -> dict[str, str]:
    """Environment additions for every ansible-runner play: this interpreter's bin first on PATH, the
    bundle's ansible.cfg (the rest of the environment, ANSIBLE_VAULT_PASSWORD_FILE included, is inherited)."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    env = {"PATH": path if bindir in path.split(os.pathsep) else bindir + os.pathsep + path}
    cfg = bundle / "ansible.cfg"
    if cfg.is_file():
        env["ANSIBLE_CONFIG"] = str(cfg)
    return env
