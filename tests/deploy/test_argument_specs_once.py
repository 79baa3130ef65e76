"""Each role variable is described once in its role's argument_specs.yml: entry points that
take the same options share one list (a YAML alias) instead of holding verbatim copies."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import yaml
from conftest import ROOT

SPECS = sorted(ROOT.glob("roles/*/meta/argument_specs.yml"))


@pytest.mark.parametrize("path", SPECS, ids=[p.parts[-3] for p in SPECS])
def test_every_option_is_written_once(path):
    text = path.read_text()
    written = Counter(re.findall(r"^      ([a-z_][a-z0-9_]*):$", text, flags=re.M))
    assert [name for name, n in written.items() if n > 1] == []
    # ...and every entry point still has them, as Ansible validates each one: the main list (an alias), or options
    # of its own that the main entry point does not describe (an entry point's parameters, e.g. cuda_toolkit's
    # apt_repository's pins)
    specs = yaml.safe_load(text)["argument_specs"]
    main = specs["main"].get("options") or {}
    for name, entry in specs.items():
        options = entry.get("options") or {}
        assert not options or options == main or name == "main" or not set(options) & set(main), name
