"""Bad inputs are refused on the controller, before any connection to a host.

inventory/ct200's host is an unreachable placeholder (ct200.example.internal):
if validation ever needed the host, these runs would report UNREACHABLE
instead of the validation message.
"""

from __future__ import annotations

import json
import re

import pytest

BAD_INPUTS = [
    (["-e", "budget=0"], "budget=0 is out of range; allowed 1..256"),
    (["-e", "budget=300"], "budget=300 is out of range; allowed 1..256"),
    (["-e", "budget=8", "-e", "topk=9"], "topk=9 is out of range (topk must be <= budget=8); allowed 1..8"),
    (
        ["-e", "window=abc"],
        "window='abc' is not an integer; an integer 1..1048576 is required (or none for a full draft cache)",
    ),
    (["-e", "block_size=12"], "block_size=12 is not allowed; allowed: 8, 16"),
    (["-e", "algorithm=medusa"], "algorithm='medusa' is not allowed; allowed: ddtree, dflash, none"),
    (
        ["-e", "sglang_service_disable_cuda_graph=yes"],
        "sglang_service_disable_cuda_graph='yes' is a str; a real boolean",
    ),
    (["-e", "sglang_service_rollback=false"], "sglang_service_rollback='false' is a str; a real boolean"),
    (["-e", "sglang_service_port=80"], "sglang_service_port=80 is out of range; allowed 1024..65535"),
    (["-e", "sglang_service_tp_size=0"], "sglang_service_tp_size=0 is out of range; allowed 1..64"),
    (["-e", "sglang_service_sync_wait_s=99"], "sglang_service_sync_wait_s=99 is out of range; allowed 0..30"),
    (["-e", "preflight_jit_sync_wait_s=31"], "jit_sync_wait_s=31 (seconds, 0..30)"),
    (
        ["-e", "sglang_service_engine=vllm"],
        "value of sglang_service_engine must be one of: sglang, simulated, got: vllm",  # the argument spec's check
    ),
    (["-e", "sim_fault=crash-on-load"], "faults are for engine simulated only"),
    (
        ["-e", "sglang_service_attention_backend=cutlass_mla"],
        "value of sglang_service_attention_backend must be one of: triton, torch_native",
    ),
    (
        ["-e", "sglang_service_tool_call_parser=kimi"],
        "sglang_service_tool_call_parser='kimi' is not one of sglang 0.5.23's",
    ),
    (
        ["-e", "sglang_service_deterministic_inference=yes"],
        "sglang_service_deterministic_inference='yes' is a str; a real boolean",
    ),
    (
        ["-e", '{"sglang_service_deterministic_inference": true, "sglang_service_attention_backend": "torch_native"}'],
        "deterministic_inference=True with attention_backend=torch_native (deterministic inference needs one of "
        "ascend, fa3, fa4, flashinfer, intel_xpu, triton)",
    ),
    (
        ["-e", '{"sglang_service_extra_args": ["--api-key", "k"]}'],
        "a list without --api-key/--admin-api-key: a key on the command line is visible to every user",
    ),
]

# The production inventories bind 0.0.0.0; their key comes from Ansible Vault.
VAULT_KEY = ["-e", "vault_sglang_service_api_key=k-test-0123456789"]


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize(("extra", "message"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_refused_before_the_host(run_playbook, extra, message):
    res = run_playbook("-i", "inventory/ct200", "playbooks/reconfigure.yml", *VAULT_KEY, *extra)
    out = _flat(res.stdout + res.stderr)
    assert res.returncode != 0, out[-2000:]
    assert message in out, out[-3000:]
    assert "UNREACHABLE" not in out
    assert "Gathering Facts" not in out, "a play after validation started"


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/reconfigure.yml", "playbooks/collect.yml"])
def test_every_playbook_validates_first(run_playbook, playbook):
    res = run_playbook(
        "-i", "inventory/ct200", playbook, *VAULT_KEY, "-e", "budget=0", "-e", "sglang_service_disable_cuda_graph=yes"
    )
    out = _flat(res.stdout)
    assert res.returncode != 0
    assert "budget=0 is out of range; allowed 1..256" in out
    assert "sglang_service_disable_cuda_graph='yes' is a str; a real boolean" in out
    assert "UNREACHABLE" not in out and "Gathering Facts" not in out


def test_every_problem_is_reported_at_once(run_playbook):
    res = run_playbook(
        "-i",
        "inventory/ct200",
        "playbooks/reconfigure.yml",
        *VAULT_KEY,
        "-e",
        "budget=8",
        "-e",
        "topk=9",
        "-e",
        "window=abc",
        "-e",
        "block_size=12",
    )
    out = _flat(res.stdout)
    assert res.returncode != 0
    for message in ("topk=9 is out of range", "window='abc' is not an integer", "block_size=12 is not allowed"):
        assert message in out


def test_valid_inputs_pass_without_contacting_the_host(run_playbook):
    res = run_playbook(
        "-i", "inventory/ct200", "playbooks/validate_inventory.yml", *VAULT_KEY, "-e", "budget=12", "-e", "topk=6"
    )
    assert res.returncode == 0, res.stdout[-3000:]
    assert "UNREACHABLE" not in res.stdout


@pytest.mark.parametrize("inventory", ["inventory/ct200", "inventory/b300", "inventory/local"])
def test_shipped_inventories_are_valid(run_playbook, inventory):
    res = run_playbook("-i", inventory, "playbooks/validate_inventory.yml", *VAULT_KEY)
    assert res.returncode == 0, res.stdout[-3000:]


def _resolved(run_playbook, tmp_path, *extra):
    out = tmp_path / "resolved.json"
    res = run_playbook(
        "-i", "inventory/ct200", "tests/deploy/show_resolved.yml", *VAULT_KEY, "-e", f"out_file={out}", *extra
    )
    assert res.returncode == 0, res.stdout[-3000:]
    return json.loads(out.read_text())


def test_short_keys_override_the_inventory(run_playbook, tmp_path):
    got = _resolved(run_playbook, tmp_path, "-e", "budget=12", "-e", "topk=6", "-e", "window=none")
    assert got["budget"] == 12 and got["topk"] == 6 and got["window"] is None
    assert got["block_size"] == 8 and got["algorithm"] == "ddtree"  # from inventory/ct200
    assert "--speculative-ddtree-budget 12 --speculative-ddtree-topk-cap 6" in " ".join(got["flags"])
    assert "--speculative-draft-window-size" not in got["flags"]


def test_inventory_values_apply_without_short_keys(run_playbook, tmp_path):
    got = _resolved(run_playbook, tmp_path)
    assert (got["budget"], got["topk"], got["window"], got["block_size"]) == (8, 4, 2048, 8)
    assert got["label"] == "ddtree-b8-t4-w2048-bs8"


def test_dflash_drops_inventory_ddtree_keys(run_playbook, tmp_path):
    got = _resolved(run_playbook, tmp_path, "-e", "algorithm=dflash")
    assert got["algorithm"] == "dflash" and got["budget"] is None and got["topk"] is None
    assert "--speculative-algorithm DFLASH" in " ".join(got["flags"])


def test_explicit_ddtree_key_with_dflash_is_refused(run_playbook):
    res = run_playbook(
        "-i", "inventory/ct200", "playbooks/validate_inventory.yml", *VAULT_KEY,
        "-e", "algorithm=dflash", "-e", "budget=8",
    )  # fmt: skip
    assert res.returncode != 0
    assert "budget='8' is a DDTree setting but algorithm=dflash" in _flat(res.stdout)


# ---- network exposure ------------------------------------------------------------------------------

EXPOSED = "sglang_service_host='0.0.0.0' is reachable beyond this host and no sglang_service_api_key is set"


@pytest.mark.parametrize("inventory", ["inventory/ct200", "inventory/b300"])
def test_a_network_bind_without_a_key_is_refused(run_playbook, inventory):
    res = run_playbook("-i", inventory, "playbooks/reconfigure.yml")
    out = _flat(res.stdout + res.stderr)
    assert res.returncode != 0
    assert EXPOSED in out and "/update_weights_from_disk" in out
    assert "UNREACHABLE" not in out and "Gathering Facts" not in out


@pytest.mark.parametrize(
    "extra",
    [
        ["-e", "sglang_service_host=127.0.0.1"],
        ["-e", "sglang_service_host=::1"],
        ["-e", '{"sglang_service_allow_unauthenticated_bind": true}'],
        ["-e", "sglang_service_api_key=k-from-the-command-line"],
    ],
    ids=["loopback", "loopback6", "explicitly-allowed", "with-key"],
)
def test_loopback_a_key_or_an_explicit_allow_is_accepted(run_playbook, extra):
    res = run_playbook("-i", "inventory/ct200", "playbooks/validate_inventory.yml", *extra)
    assert res.returncode == 0, _flat(res.stdout)[-2000:]


@pytest.mark.parametrize("host", ["10.1.2.3", "ct200.example.internal", "::"])
def test_every_non_loopback_address_needs_the_key(run_playbook, host):
    res = run_playbook("-i", "inventory/ct200", "playbooks/validate_inventory.yml", "-e", f"sglang_service_host={host}")
    assert res.returncode != 0
    assert f"sglang_service_host={host!r} is reachable beyond this host" in _flat(res.stdout)


def test_a_key_that_is_not_one_printable_word_is_refused_and_never_shown(run_playbook):
    res = run_playbook(
        "-i", "inventory/ct200", "playbooks/validate_inventory.yml",
        "-e", '{"sglang_service_api_key": "two words-5e1f", "sglang_service_admin_api_key": "tab\\there"}',
    )  # fmt: skip
    out = _flat(res.stdout + res.stderr)
    assert res.returncode != 0
    assert "sglang_service_api_key must be one word of printable ASCII" in out
    assert "sglang_service_admin_api_key must be one word of printable ASCII" in out
    assert "two words-5e1f" not in out
