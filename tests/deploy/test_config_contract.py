"""One config contract: the label, the engine flags and the expected echo are the same
whichever path produced them (the sweep's planner, the playbook, the simulated engine),
and the short keys beat the role variables in one documented order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from repro_py import spec_config
from repro_py.simengine.faults import _WITH_ARG, FAULT_NAMES
from repro_py.sweep.grid import PlannedConfig

FAULTS = [f"{name}:20" if name in _WITH_ARG else name for name in FAULT_NAMES]


def _playbook_labels(run_playbook, tmp_path: Path, extra: list[str]) -> dict[str, object]:
    hosts = {f"fault{i}": {"ansible_connection": "local", "sim_fault": fault} for i, fault in enumerate(FAULTS)}
    inv = tmp_path / "faults.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"sglang_servers": {"hosts": hosts}}}}))
    out = tmp_path / "labels.json"
    res = run_playbook(
        "-i", "inventory/local", "-i", str(inv), "-l", "fault*", "tests/deploy/show_labels.yml",
        "-e", f"out_file={out}", *extra,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    got = json.loads(out.read_text())
    return {"labels": [got[f"fault{i}"] for i in range(len(FAULTS))], "flags": got["_flags"], "echo": got["_echo"]}


@pytest.mark.parametrize(
    "short",
    [
        {"budget": 8, "topk": 4, "window": 2048, "block_size": 8},
        {"algorithm": "dflash", "window": "none", "block_size": 16},
    ],
    ids=["ddtree", "dflash"],
)
def test_label_flags_and_echo_agree_between_the_sweep_and_the_playbook_for_every_fault(run_playbook, tmp_path, short):
    """`crash-after:20` was `...-crash-after-20` in the sweep and `...-crash-after_20` in the role."""
    extra = [a for k, v in short.items() for a in ("-e", f"{k}={v}")]
    played = _playbook_labels(run_playbook, tmp_path, extra)
    planned = [PlannedConfig(spec=spec_config.validate(dict(short)), sim_fault=f) for f in FAULTS]
    assert played["labels"] == [p.label for p in planned]
    assert played["labels"][FAULTS.index("crash-after:20")].endswith("-fault-crash-after-20")
    cfg = planned[0].spec
    drafter = yaml.safe_load((ROOT / "inventory/local/group_vars/all/service.yml").read_text())[
        "sglang_service_drafter_path"
    ]
    assert played["flags"] == spec_config.to_engine_flags(cfg, drafter_path=drafter)
    assert {k: v for k, v in played["echo"].items() if k != "tool_call_parser"} == spec_config.expected_echo(cfg)


def test_the_simulated_engine_echoes_what_the_contract_expects(tmp_path):
    """The third path: the engine started with the contract's flags reports the contract's echo."""
    from repro_py.bench.server_info import ServerInfo  # noqa: PLC0415
    from repro_py.gates.echo import check_echo  # noqa: PLC0415
    from repro_py.simengine.process import start_engine  # noqa: PLC0415

    for short in ({"budget": 8, "topk": 4, "window": 2048, "block_size": 8},
                  {"algorithm": "dflash", "window": "none", "block_size": 16}, {"algorithm": "none"}):  # fmt: skip
        cfg = spec_config.validate(dict(short))
        flags = spec_config.to_engine_flags(cfg, drafter_path=None)
        eng = start_engine([*flags, "--sim-load-seconds", "0.1", "--sim-warmup-seconds", "0.1"],
                           model_root=tmp_path / cfg.label)  # fmt: skip
        try:
            eng.wait_ready(30)
            import urllib.request  # noqa: PLC0415

            with urllib.request.urlopen(eng.url + "/server_info", timeout=10) as resp:
                info = json.loads(resp.read())
        finally:
            eng.stop(timeout=5)
        assert spec_config.echo_differences(info, spec_config.expected_echo(cfg)) == [], cfg.label
        assert check_echo(ServerInfo(raw=info, path="/server_info"), cfg) == []


def test_short_key_beats_role_extra_var(run_playbook, tmp_path):
    """The precedence is applied once, in the plugin: a short key on the command line wins over
    the role variable wherever its value came from, an extra var of the long name included."""
    from test_validate_refuses import _resolved  # noqa: PLC0415

    got = _resolved(run_playbook, tmp_path, "-e", "budget=12", "-e", "sglang_service_ddtree_budget=16")
    assert got["budget"] == 12
    assert "--speculative-ddtree-budget 12" in " ".join(got["flags"])
    assert got["label"].startswith("ddtree-b12-")
    # without the short key the long extra var applies (it beats the inventory)
    got = _resolved(run_playbook, tmp_path, "-e", "sglang_service_ddtree_budget=16")
    assert got["budget"] == 16


def test_the_precedence_is_written_once_and_as_the_plugin_applies_it():
    readme = (ROOT / "README.md").read_text()
    deploy = (ROOT / "docs/deploy.md").read_text()
    rule = (
        "a short key (`-e budget=8`) > `-e sglang_service_<var>` > inventory host vars > inventory group vars"
        " > role defaults"
    )
    assert rule in deploy
    assert "Precedence" not in readme.split("### Short extra vars")[1].split("\n### ")[0] or rule in readme
    assert "docs/deploy.md#short-extra-vars" in readme


def test_the_sweep_reserves_the_long_names():
    from repro_py.sweep.cmdline import parse_extra_vars  # noqa: PLC0415
    from repro_py.sweep.errors import PlanError  # noqa: PLC0415

    for key, var in spec_config.ROLE_VARS.items():
        with pytest.raises(PlanError, match=f"role variable of the config key '{key}'"):
            parse_extra_vars([f"{var}=8"])
    with pytest.raises(PlanError, match="sim_fault"):
        parse_extra_vars(["sglang_service_sim_faults=[crash-on-load]"])
    assert parse_extra_vars(["sglang_service_sim_speed=10"]) == {"sglang_service_sim_speed": 10}


def test_a_playbook_resolves_the_inputs_once_per_host(run_playbook, tmp_path):
    """site.yml and reconfigure.yml validate in validate_inventory.yml; the role's own resolve step
    then skips (it still runs for a play that uses the role without that playbook)."""
    out = tmp_path / "resolved.json"
    play = tmp_path / "twice.yml"
    play.write_text(
        "- name: Validate inputs\n"
        f"  ansible.builtin.import_playbook: {ROOT}/playbooks/validate_inventory.yml\n"
        "- name: The role's resolve step again\n"
        "  hosts: all\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Resolve as tasks/main.yml does\n"
        "      ansible.builtin.include_role:\n"
        "        name: ddtree.sglang.sglang_service\n"
        "        tasks_from: resolve\n"
        "      when: not (_sglang_service_resolved | default(false))\n"
        "    - name: Record\n"
        "      ansible.builtin.copy:\n"
        "        content: \"{{ {'resolved': _sglang_service_resolved} | to_json }}\"\n"
        f"        dest: {out}\n"
        "        mode: '0644'\n"
        "      delegate_to: localhost\n"
        "      vars:\n"
        "        ansible_connection: local\n"
        "        ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
    )
    res = run_playbook("-i", "inventory/ct200", str(play), "-e", "sglang_service_api_key=k-1234567890")
    assert res.returncode == 0, res.stdout[-3000:]
    assert res.stdout.count("Validate the service inputs and the speculative settings") == 1
    assert json.loads(out.read_text())["resolved"] is True
    main = (ROOT / "roles/sglang_service/tasks/main.yml").read_text()
    assert "when: not (_sglang_service_resolved | default(false))" in main
