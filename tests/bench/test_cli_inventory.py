"""``python -m repro_py.bench -i INVENTORY`` and ``python -m repro_py.gates -i INVENTORY``: the URL, the served
name and both keys from the inventory as its plays resolve them (vault included), no key on a command line;
the admin key flushes the cache (sglang accepts only it there when the server has one)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from repro_py.bench import cli as bench_cli
from repro_py.exitcodes import ExitCode
from repro_py.gates import cli as gates_cli
from repro_py.simengine.process import Engine

KEY = "bench-key-0c9e1f"
ADMIN = "bench-admin-77ab02"
PASSWORD = "bench-vault-pass"
SMALL = ["--contexts", "60", "--concurrency", "1", "--repeats", "1", "--max-tokens", "8", "--quiet"]


def _inventory(tmp_path: Path, url: str) -> tuple[Path, Path]:
    password = tmp_path / "pass"
    password.write_text(PASSWORD + "\n")
    inv = tmp_path / "inv"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_host": "127.0.0.1"}}}}))
    (inv / "group_vars" / "all" / "service.yml").write_text(
        f"sweep_endpoint_url: {url}\nsglang_service_served_model_name: default\n"
        "sglang_service_api_key: \"{{ vault_api_key }}\"\nsglang_service_admin_api_key: \"{{ vault_admin_key }}\"\n"
    )
    vault = inv / "group_vars" / "all" / "vault.yml"
    vault.write_text(f"vault_api_key: {KEY}\nvault_admin_key: {ADMIN}\n")
    subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt", str(vault),
                    "--vault-password-file", str(password)], check=True, capture_output=True)  # fmt: skip
    return inv, password


def test_bench_and_gates_take_url_and_keys_from_a_vaulted_inventory(
    engine_factory: Callable[[list[str]], Engine], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = engine_factory(["--api-key", KEY, "--admin-api-key", ADMIN])
    inv, password = _inventory(tmp_path, engine.url)
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    monkeypatch.delenv("SGLANG_ADMIN_API_KEY", raising=False)

    out = tmp_path / "bench.json"
    assert bench_cli.main(["-i", str(inv), "--vault-password-file", str(password), *SMALL, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    (cell,) = doc["cells"]
    assert cell["status"] == "ok" and cell["notes"] == []  # the cache flushed with the admin key
    assert doc["settings"]["url"] == engine.url
    assert KEY not in out.read_text() and ADMIN not in out.read_text()

    # without the inventory's keys the same server refuses every request
    assert bench_cli.main(["--url", engine.url, *SMALL]) == ExitCode.FAILURE
    assert "401" in capsys.readouterr().err

    gates_out = tmp_path / "gates.json"
    code = gates_cli.main(["-i", str(inv), "--vault-password-file", str(password), "--expect", "algorithm=none",
                           "--lossless-tokens", "8", "--max-tokens", "64", "--out", str(gates_out)])  # fmt: skip
    result = json.loads(gates_out.read_text())
    assert result["config_echo"]["passed"], result["config_echo"]
    assert code in (ExitCode.OK, ExitCode.FAILURE)  # the coding gate's verdict on 64 tokens is not the point
    captured = capsys.readouterr()
    assert KEY not in captured.out + captured.err and ADMIN not in captured.out + captured.err


def test_without_the_vault_password_nothing_is_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv, _ = _inventory(tmp_path, "http://127.0.0.1:9")
    assert bench_cli.main(["-i", str(inv), *SMALL]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert str(inv / "group_vars" / "all" / "vault.yml") in err and "--vault-password-file" in err
    assert gates_cli.main(["--expect", "algorithm=none"]) == ExitCode.USAGE
    assert "--url or --inventory is required" in capsys.readouterr().err
