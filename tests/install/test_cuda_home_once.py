"""The toolkit's CUDA_HOME is published once (the local fact the cuda_toolkit role writes)
and read from there; no play parses the environment file for it again."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_play_parses_cuda_home_out_of_the_environment_file():
    offenders = [
        str(p.relative_to(ROOT))
        for base in ("roles", "playbooks")
        for p in (ROOT / base).rglob("*.yml")
        if "^CUDA_HOME=" in p.read_text()
    ]
    assert offenders == []


def test_the_local_fact_template_is_an_ini_file_ansible_can_read():
    text = (ROOT / "roles/cuda_toolkit/templates/etc/ansible/facts.d/cuda_toolkit.fact.j2").read_text()
    rendered = text.replace("{{ ansible_managed }}", "Ansible managed").replace("{{ cuda_toolkit_home }}", "/opt/cuda")
    rendered = rendered.replace("{{ cuda_toolkit_version }}", "13.0.3").replace("{{ cuda_toolkit_method }}", "wheel")
    ini = configparser.ConfigParser()
    ini.read_string(rendered)
    assert ini["toolkit"]["cuda_home"] == "/opt/cuda"
    for role in ("preflight", "sglang_service"):
        defaults = (ROOT / f"roles/{role}/defaults/main.yml").read_text()
        assert "ansible_local.cuda_toolkit.toolkit.cuda_home" in defaults


def test_every_reader_of_the_fact_defines_what_it_reads():
    collect = (ROOT / "playbooks/collect.yml").read_text()
    assert "_collect_cuda_home: \"{{ ansible_local.cuda_toolkit.toolkit.cuda_home | default('') }}\"" in collect
