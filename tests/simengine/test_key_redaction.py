"""The simulated engine keeps the API keys from clients and logs, as the patched sglang does
(patch 0012): /server_info asked with the inference key carries neither key."""

from __future__ import annotations

from repro_py.simengine import settings as engine_settings
from repro_py.simengine.process import Engine
from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory

INFERENCE_KEY = "sk-inference-2b7c41"
ADMIN_KEY = "sk-admin-9e0d53"


def test_server_info_with_the_inference_key_carries_neither_key(engine_factory: EngineFactory) -> None:
    eng: Engine = engine_factory([*DDTREE_B8, *FAST, "--api-key", INFERENCE_KEY, f"--admin-api-key={ADMIN_KEY}"])
    eng.wait_ready(30)
    for route in ("/server_info", "/get_server_info"):
        status, body, _ = eng.get(route)  # the engine's client sends the inference key
        assert status == 200, (route, body[:200])
        text = body.decode()
        assert INFERENCE_KEY not in text and ADMIN_KEY not in text, route
    info = eng.get_json("/server_info")
    assert info["api_key"] == "<redacted>" and info["admin_api_key"] == "<redacted>"
    assert info["internal_states"][0]["api_key"] == "<redacted>"
    assert "--api-key <redacted>" in info["launch_command"]
    assert "--admin-api-key=<redacted>" in info["launch_command"]
    # the key still authenticates
    assert Engine(proc=eng.proc, port=eng.port, log_path=eng.log_path).get("/server_info")[0] == 401
    eng.stop(timeout=5)
    log = eng.log_path.read_text()
    assert "server_args=" in log
    assert INFERENCE_KEY not in log and ADMIN_KEY not in log


def test_unset_keys_read_as_unset(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST])
    eng.wait_ready(30)
    info = eng.get_json("/server_info")
    assert info["api_key"] is None and info["admin_api_key"] is None


def test_redact_keys_both_forms() -> None:
    argv = ["--api-key", "a1", "--admin-api-key=b2", "--port", "30000", "--api-key=c3", "--admin-api-key", "d4"]
    assert engine_settings.redact_keys(argv) == [
        "--api-key", "<redacted>", "--admin-api-key=<redacted>", "--port", "30000",
        "--api-key=<redacted>", "--admin-api-key", "<redacted>",
    ]  # fmt: skip
