"""Every role documents every default in meta/argument_specs.yml (type, description, same default)."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from tests.playbook_tasks import ROLES


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_specified(role):
    defaults_file = ROOT / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = specs["main"]["options"]
    missing = sorted(set(defaults or {}) - set(options))
    assert not missing, f"{role}: defaults without an argument spec: {missing}"
    for name, value in (defaults or {}).items():
        spec = options[name]
        assert spec.get("type"), f"{role}: {name} has no type"
        assert spec.get("description"), f"{role}: {name} has no description"
        assert spec.get("default") == value, f"{role}: {name} default {spec.get('default')!r} != {value!r}"


@pytest.mark.parametrize("role", ["ddtree_defaults", "preflight", "sglang_service"])
def test_readme_lists_every_variable(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    absent = [name for name in defaults if f"`{name}`" not in readme]
    assert not absent, f"{role}/README.md does not document {absent}"
