"""The tools read an inventory as its plays do: templated and decrypted by Ansible itself, vault included.

Before, the sweep read ``ansible-inventory --list``, which does not template: with the
shipped ``inventory/ct200`` and its key in Ansible Vault the client sent the text
``{{ vault_sglang_service_api_key | default('') }}`` as its bearer key and got 401.
Here every variant docs/deploy.md and REPRODUCE.md describe (a vault file made with
``ansible-vault create``/``encrypt``, a value made with ``encrypt_string``, the password
from ``--vault-password-file``, ``ANSIBLE_VAULT_PASSWORD_FILE``, ``--vault-id`` or
``--ask-vault-pass``) resolves to the key itself, the role's defaults apply, and what
cannot be resolved is refused naming the variable and the file, never the key.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repro_py.ansibleaccess import VAULT_PROMPT, AnsibleAccess
from repro_py.inventory_values import SECRET_VARS, TOOL_VARS, defined_in
from repro_py.sweep import cli
from repro_py.sweep.errors import PlanError
from repro_py.sweep.inventory import load_target

ROOT = Path(__file__).resolve().parents[2]
KEY = "rehearsal-key-7f3a9c21"
ADMIN = "admin-key-55d0e8b4"
VAULT_PASSWORD = "vault-pass-for-tests"
VAULT = [str(Path(sys.executable).parent / "ansible-vault")]


def _vault(*args: str, password_file: Path, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [*VAULT, *args, "--vault-password-file", str(password_file)],
        input=stdin, capture_output=True, text=True, check=True, env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    return proc.stdout


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "vault-pass"
    path.write_text(VAULT_PASSWORD + "\n", encoding="utf-8")
    path.chmod(0o600)
    return path


def shipped_copy(tmp_path: Path, name: str = "ct200") -> Path:
    inv = tmp_path / name
    shutil.copytree(ROOT / "inventory" / name, inv)
    return inv


def vault_file_inventory(tmp_path: Path, password_file: Path, name: str = "ct200") -> Path:
    """The documented way (README.md, docs/deploy.md): group_vars/all/vault.yml made with ansible-vault."""
    inv = shipped_copy(tmp_path, name)
    vault = inv / "group_vars" / "all" / "vault.yml"
    vault.write_text(f"vault_sglang_service_api_key: {KEY}\n", encoding="utf-8")
    _vault("encrypt", str(vault), password_file=password_file)
    assert vault.read_text().startswith("$ANSIBLE_VAULT")
    return inv


def test_the_shipped_inventory_with_a_vault_file_resolves_to_the_key(tmp_path: Path, password_file: Path) -> None:
    inv = vault_file_inventory(tmp_path, password_file)
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inv), "--list",
         "--vault-password-file", str(password_file)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "{{ vault_sglang_service_api_key | default('') }}" in listed  # what the old reader sent as its key

    target = load_target(inv, access=AnsibleAccess(vault_password_files=(str(password_file),)))
    assert target.endpoint.api_key == KEY
    assert target.endpoint.headers()["Authorization"] == f"Bearer {KEY}"
    assert target.endpoint.base_url == "http://ct200.example.internal:30001"  # 0.0.0.0 bind: the host's name
    assert target.endpoint.model == "kimi-k2.6" and target.engine_kind == "real"
    assert target.var("sweep_default_config")["budget"] == 8
    # the key lives in the endpoint only, and nothing prints it
    assert not set(SECRET_VARS) & set(target.hostvars)
    assert KEY not in repr(target) and KEY not in repr(target.endpoint)


def test_encrypt_string_value_with_the_password_from_the_environment(
    tmp_path: Path, password_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """REPRODUCE.md's way: the service.yml line replaced by an encrypt_string value; ANSIBLE_VAULT_PASSWORD_FILE."""
    inv = shipped_copy(tmp_path, "b300")
    service = inv / "group_vars" / "all" / "service.yml"
    lines = [ln for ln in service.read_text().splitlines() if not ln.startswith("sglang_service_api_key:")]
    encrypted = _vault("encrypt_string", "--name", "sglang_service_api_key", "--stdin-name", "sglang_service_api_key",
                       password_file=password_file, stdin=KEY)  # fmt: skip
    admin = _vault("encrypt_string", ADMIN, "--name", "sglang_service_admin_api_key", password_file=password_file)
    service.write_text("\n".join(lines) + "\n" + encrypted + admin, encoding="utf-8")
    assert yaml.safe_load(service.read_text().replace("!vault", "")) is not None
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password_file))
    target = load_target(inv)
    assert (target.endpoint.api_key, target.endpoint.admin_api_key) == (KEY, ADMIN)
    assert target.endpoint.headers(admin=True)["Authorization"] == f"Bearer {ADMIN}"
    assert target.endpoint.base_url == "http://b300.example.internal:30001"


def test_vault_id_and_asked_password(tmp_path: Path, password_file: Path) -> None:
    inv = vault_file_inventory(tmp_path, password_file)
    by_id = load_target(inv, access=AnsibleAccess(vault_ids=(f"site@{password_file}",)))
    assert by_id.endpoint.api_key == KEY
    # --ask-vault-pass: ansible-playbook's own prompt, answered through ansible-runner (never on a command line)
    asked = AnsibleAccess(ask_vault_pass=True).with_answers(lambda prompt: VAULT_PASSWORD)
    assert asked.prompts() == [VAULT_PROMPT] and VAULT_PASSWORD not in asked.cmdline()
    assert VAULT_PASSWORD not in repr(asked)
    assert load_target(inv, access=asked).endpoint.api_key == KEY


def test_no_vault_password_is_refused_naming_the_variable_and_the_file(tmp_path: Path, password_file: Path) -> None:
    inv = shipped_copy(tmp_path)
    service = inv / "group_vars" / "all" / "service.yml"
    lines = [ln for ln in service.read_text().splitlines() if not ln.startswith("sglang_service_api_key:")]
    encrypted = _vault("encrypt_string", KEY, "--name", "sglang_service_api_key", password_file=password_file)
    service.write_text("\n".join(lines) + "\n" + encrypted, encoding="utf-8")
    with pytest.raises(PlanError) as refused:
        load_target(inv)
    text = "\n".join(refused.value.problems)
    assert "sglang_service_api_key cannot be resolved" in text and str(service) in text
    assert "--vault-password-file" in text and KEY not in text

    whole = vault_file_inventory(tmp_path / "whole", password_file)
    with pytest.raises(PlanError) as refused:
        load_target(whole)
    text = "\n".join(refused.value.problems)
    assert str(whole / "group_vars" / "all" / "vault.yml") in text and "no vault password given" in text

    wrong = tmp_path / "wrong-pass"
    wrong.write_text("not-the-password\n", encoding="utf-8")
    with pytest.raises(PlanError) as refused:
        load_target(whole, access=AnsibleAccess(vault_password_files=(str(wrong),)))
    assert str(whole / "group_vars" / "all" / "vault.yml") in "\n".join(refused.value.problems)

    with pytest.raises(PlanError, match=r"vault password file .*missing-file does not exist"):
        cli_target(whole, "--vault-password-file", str(tmp_path / "missing-file"))


def cli_target(inv: Path, *args: str) -> object:
    from repro_py.sweep.inventory import target_from_args  # noqa: PLC0415

    return target_from_args(cli.build_parser().parse_args([str(inv), *args]))


def test_an_undefined_variable_is_named_with_its_file(tmp_path: Path) -> None:
    inv = shipped_copy(tmp_path)
    service = inv / "group_vars" / "all" / "service.yml"
    text = service.read_text().replace("{{ vault_sglang_service_api_key | default('') }}", "{{ site_key }}")
    service.write_text(text, encoding="utf-8")
    with pytest.raises(PlanError) as refused:
        load_target(inv)
    (problem,) = refused.value.problems
    assert problem.startswith("ct200.example.internal: sglang_service_api_key cannot be resolved")
    assert str(service) in problem and "'site_key' is undefined" in problem


def test_role_defaults_layers_and_extra_vars_apply(tmp_path: Path) -> None:
    inv = tmp_path / "bare"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_host": "192.0.2.7"}}}}))
    target = load_target(inv)
    # sglang_service's defaults, as the plays see them: port 30001, served name kimi-k2.6, loopback bind
    assert target.endpoint.model == "kimi-k2.6" and target.endpoint.base_url == "http://192.0.2.7:30001"
    layer = tmp_path / "layer"
    (layer / "group_vars" / "all").mkdir(parents=True)
    (layer / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {}}}}))
    layer_vars = "sglang_service_host: 198.51.100.4\nsglang_service_port: 31555\n"
    (layer / "group_vars" / "all" / "x.yml").write_text(layer_vars)
    layered = load_target(inv, layers=[layer])
    assert layered.endpoint.base_url == "http://198.51.100.4:31555"
    assert load_target(inv, layers=[layer], extra_vars={"sglang_service_port": 31556}).endpoint.base_url.endswith(
        ":31556"
    )


def test_a_key_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="sglang_service_api_key resolves to a dict, not a string"):
        load_target(Path(), resolved={"h1": {"sglang_service_api_key": {"__ansible_vault": "x"}}})


def test_defined_in_finds_the_file_that_sets_a_variable() -> None:
    assert defined_in([ROOT / "inventory" / "ct200"], "sglang_service_api_key") == [
        ROOT / "inventory" / "ct200" / "group_vars" / "all" / "service.yml"
    ]
    local = ROOT / "inventory" / "local"
    assert defined_in([local], "ansible_port") == [local / "host_vars" / "sglang-testhost" / "main.yml"]


def _names_read(path: Path) -> set[str]:
    """Variable names the code reads from a target: ``.var("NAME"...)`` and ``hostvars.get("NAME"...)``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        owner = ast.unparse(node.func.value)
        if node.func.attr == "var" or (node.func.attr == "get" and owner.endswith(("hostvars", "values"))):
            out.add(first.value)
    return out


def test_every_variable_the_tools_read_is_resolved() -> None:
    read: set[str] = set()
    for path in (ROOT / "repro_py").rglob("*.py"):
        read |= {n for n in _names_read(path) if n.startswith(("sglang_", "sweep_", "tune_", "ansible_"))}
    assert read, "the scan found nothing: it no longer matches the code"
    assert read <= set(TOOL_VARS), sorted(read - set(TOOL_VARS))


def test_the_inventory_sets_the_sweeps_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``sweep_bench`` in the inventory (the field's reduced grid, say) is the sweep's benchmark unless the command
    line says otherwise; a malformed one is refused naming it."""
    from tests.sweep.test_cli import write_inventory  # noqa: PLC0415

    inv = write_inventory(tmp_path / "inv.yml")
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["vars"]["sweep_bench"] = {"contexts": [60, 1024], "concurrency": [1], "repeats": 2, "max_tokens": 64}
    inv.write_text(yaml.safe_dump(doc))
    assert cli.main([str(inv), "--dry-run", "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "bench 2 contexts [60, 1024] x 1 concurrency [1] x 2 repeats, max_tokens 64" in " ".join(out.split())
    assert cli.main([str(inv), "--dry-run", "--repeats", "3", "--results", str(tmp_path / "r")]) == 0
    assert "x 3 repeats" in " ".join(capsys.readouterr().out.split())
    doc["all"]["vars"]["sweep_bench"] = {"context": [60]}
    inv.write_text(yaml.safe_dump(doc))
    assert cli.main([str(inv), "--dry-run", "--results", str(tmp_path / "r")]) == 2
    assert "sweep_bench must be a mapping of contexts, concurrency, repeats, max_tokens" in capsys.readouterr().err
