#!/usr/bin/env python3
"""Write each role's defaults/main.yml from its meta/argument_specs.yml: a default is written once, in the spec.

The argument spec's main entry point owns every option's type, choices, description and default
(``ansible-doc -t role`` and docs/variables.md show it); Ansible sets a role's defaults from
defaults/main.yml only, so that file is generated from the spec: each option, in the spec's order,
under its description as a comment.

Usage:
    scripts/render-role-defaults.py           rewrite every roles/*/defaults/main.yml
    scripts/render-role-defaults.py --check   exit 1 naming each file that is out of date (make lint)
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
HEADER = (
    "---\n"
    "# Generated from meta/argument_specs.yml (the main entry point's defaults) by scripts/render-role-defaults.py:\n"
    "# edit the spec, then run the script; `make lint` fails while this file differs from it.\n"
)


class _Dumper(yaml.SafeDumper):
    """Block sequences indented under their key, as yamllint's indentation rule (and the rest of the bundle) has."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """A string of several lines as a literal block (as a template over lines is written by hand)."""
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _comment(text: str) -> str:
    words = " ".join(str(text).split())
    return "".join(f"# {line}\n" for line in textwrap.wrap(words, width=114, break_on_hyphens=False))


def render(spec_path: Path) -> str:
    options: dict[str, Any] = yaml.safe_load(spec_path.read_text(encoding="utf-8"))["argument_specs"]["main"]["options"]
    parts = [HEADER]
    for name, option in options.items():
        if "default" not in option:
            continue
        description = option.get("description") or ""
        if isinstance(description, list):
            description = " ".join(str(d) for d in description)
        body = yaml.dump({name: option["default"]}, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=140, allow_unicode=True)  # fmt: skip
        parts.append("\n" + _comment(description) + body)
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a defaults file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for spec in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        target = spec.parent.parent / "defaults" / "main.yml"
        text = render(spec)
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        if args.check:
            stale.append(str(target.relative_to(ROOT)))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print("out of date (run scripts/render-role-defaults.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
