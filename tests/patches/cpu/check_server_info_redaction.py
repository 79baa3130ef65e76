"""The API keys never reach a client of /server_info, launch_command or a log line.

sglang 0.5.23 returned ``api_key`` and ``admin_api_key`` from /server_info
(build_server_info -> server_args.resolved_dict()) and in ``launch_command``,
to anyone holding the inference key. Checked here with SGLang's own code: the
command line parsed by ``prepare_server_args`` (which sets launch_command),
``build_server_info``, the /server_info and /get_server_info handlers of
entrypoints/http_server.py and the ``server_args=`` log line of
entrypoints/engine.py (their function bodies, read from the patched files and
run over a stand-in tokenizer manager: importing those modules needs GPU-side
packages the CPU venv does not carry), and repr(ServerArgs).

Run against the series before patch 0012, every test here fails with the
key in the answer.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import types
from pathlib import Path
from typing import Any

import pytest
import sglang
from sglang.srt.sampling.watermarking.core import redact_watermark_command_line, redact_watermark_secrets
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils import msgspec_to_builtins
from sglang.srt.utils.common import build_server_info

INFERENCE_KEY = "inference-key-7f3a9c"
ADMIN_KEY = "admin-key-51d2e8"
ARGV = ["--model-path", "/models/target", "--api-key", INFERENCE_KEY, f"--admin-api-key={ADMIN_KEY}"]
SRT = Path(sglang.__file__).parent / "srt"


def _function(path: Path, name: str, namespace: dict) -> Any:
    """A module-level function of ``path``, without its decorators, defined in ``namespace``."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    fn.decorator_list = []
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


def _secrets_in(value: Any) -> list[str]:
    text = json.dumps(value, default=str)
    return [k for k in (INFERENCE_KEY, ADMIN_KEY) if k in text]


@pytest.fixture(scope="module")
def server_args():
    args = prepare_server_args(ARGV)
    assert args.api_key == INFERENCE_KEY and args.admin_api_key == ADMIN_KEY  # authentication still gets them
    return args


def _handlers(server_args):
    async def get_internal_state():
        # each DP rank's internal state carries the resolved args, as the scheduler's does
        return [{**server_args.resolved_dict(), "avg_spec_accept_length": 3.2}]

    tokenizer_manager = types.SimpleNamespace(
        server_args=server_args, startup_time=1.5, get_internal_state=get_internal_state
    )
    ns = {
        "_global_state": types.SimpleNamespace(tokenizer_manager=tokenizer_manager, scheduler_info={"status": "ready"}),
        "build_server_info": build_server_info, "redact_watermark_secrets": redact_watermark_secrets,
        "msgspec_to_builtins": msgspec_to_builtins, "__version__": "0.5.23", "List": list, "Dict": dict,
        "Any": Any, "logger": logging.getLogger("http_server"),
    }  # fmt: skip
    path = SRT / "entrypoints" / "http_server.py"
    server_info = _function(path, "server_info", ns)
    get_server_info = _function(path, "get_server_info", ns)
    return server_info, get_server_info


@pytest.mark.parametrize("route", ["/server_info", "/get_server_info"])
def test_server_info_routes_carry_neither_key(server_args, route):
    server_info, get_server_info = _handlers(server_args)
    body = asyncio.run(server_info() if route == "/server_info" else get_server_info())
    assert _secrets_in(body) == [], f"{route} returns {_secrets_in(body)}"
    assert body["api_key"] == "<redacted>" and body["admin_api_key"] == "<redacted>"
    assert body["internal_states"][0]["api_key"] == "<redacted>"
    assert "--api-key <redacted>" in body["launch_command"]
    assert "--admin-api-key=<redacted>" in body["launch_command"]
    assert body["model_path"] == "/models/target"  # the rest is still there


def test_unset_keys_stay_visible_as_unset():
    args = prepare_server_args(["--model-path", "/models/target"])
    body = msgspec_to_builtins(redact_watermark_secrets(build_server_info(args, {})))
    assert body["api_key"] is None and body["admin_api_key"] is None


def test_launch_command_and_log_line_carry_neither_key(server_args, caplog):
    assert _secrets_in(server_args.launch_command) == []
    # engine.py logs f"server_args={_server_args_for_logging(server_args)}" at startup
    ns = {
        "redact_watermark_secrets": redact_watermark_secrets,
        "ServerArgs": type(server_args),
        "Dict": dict,
        "Any": Any,
    }
    for_logging = _function(SRT / "entrypoints" / "engine.py", "_server_args_for_logging", ns)
    line = f"server_args={for_logging(server_args)}"
    assert _secrets_in(line) == [], line
    assert _secrets_in(repr(server_args)) == []
    # Engine(...) builds its launch_command from redact_watermark_secrets(kwargs)
    engine_call = ", ".join(f"{k}={v!r}" for k, v in redact_watermark_secrets(
        {"model_path": "/m", "api_key": INFERENCE_KEY, "admin_api_key": ADMIN_KEY}).items())  # fmt: skip
    assert _secrets_in(engine_call) == []


@pytest.mark.parametrize(
    "argv",
    [["--api-key", INFERENCE_KEY], [f"--api-key={INFERENCE_KEY}"], ["--admin-api-key", ADMIN_KEY],
     [f"--admin-api-key={ADMIN_KEY}"]],
)  # fmt: skip
def test_command_line_redaction_covers_both_forms(argv):
    line = redact_watermark_command_line(["--model-path", "/m", *argv, "--port", "30000"])
    assert _secrets_in(line) == [] and "--port 30000" in line


def test_watermark_secrets_still_redacted():
    body = redact_watermark_secrets(
        {"watermark_key": "wm-secret", "api_key": INFERENCE_KEY, "nested": [{"admin_api_key": ADMIN_KEY}]}
    )
    assert body == {"watermark_key": "<redacted>", "api_key": "<redacted>", "nested": [{"admin_api_key": "<redacted>"}]}
