"""The flags the service renders for Kimi K2.x are sglang 0.5.23's, read from the pinned wheel.

The wheel is the sha256-pinned one of the patch series (patches/tools/series.py,
downloaded once into .cache/sglang-wheel/); its source files are parsed (ast),
nothing is imported. Skipped when the wheel cannot be fetched, failed when CI
demands it (REPRO_REQUIRE_SGLANG_CPU=1).
"""

from __future__ import annotations

import ast
import sys
import zipfile

import yaml
from conftest import ROOT

from repro_py.simengine import sglang_choices

sys.path.insert(0, str(ROOT / "patches" / "tools"))


def _list_assigned(zf: zipfile.ZipFile, member: str, name: str) -> list[str]:
    tree = ast.parse(zf.read(member).decode())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value = ast.literal_eval(node.value)
            return [str(v) for v in value]
    raise AssertionError(f"{name} not found in {member}")


def _spec_choices(option: str) -> list[str]:
    specs = yaml.safe_load((ROOT / "roles/sglang_service/meta/argument_specs.yml").read_text())["argument_specs"]
    return [str(c) for c in specs["main"]["options"][option]["choices"]]


def test_attention_backends_are_exactly_the_wheels(wheel: zipfile.ZipFile):
    theirs = _list_assigned(wheel, "sglang/srt/arg_groups/choices.py", "ATTENTION_BACKEND_CHOICES")
    assert list(sglang_choices.ATTENTION_BACKENDS) == theirs
    assert _spec_choices("sglang_service_attention_backend") == theirs
    assert "cutlass_mla" not in theirs


def test_deterministic_inference_backends_are_the_wheels(wheel: zipfile.ZipFile):
    """What --enable-deterministic-inference accepts (arg_groups/overrides.py refuses any other backend): the
    simulated engine's list and the role's assert list are the wheel's."""
    theirs = _list_assigned(wheel, "sglang/srt/arg_groups/choices.py", "DETERMINISTIC_ATTENTION_BACKEND_CHOICES")
    assert list(sglang_choices.DETERMINISTIC_ATTENTION_BACKENDS) == theirs
    role_vars = yaml.safe_load((ROOT / "roles/sglang_service/vars/main.yml").read_text())
    assert role_vars["_sglang_service_deterministic_backends"] == theirs
    overrides = wheel.read("sglang/srt/arg_groups/overrides.py").decode()
    assert "attention backends are supported for deterministic inference, " in overrides
    assert "but you explicitly specified '{view.attention_backend}'." in overrides
    assert sglang_choices.deterministic_backend_refusal("x").endswith("but you explicitly specified 'x'.")
    exec_fields = wheel.read("sglang/srt/arg_groups/fields/exec_.py").decode()
    assert "enable_deterministic_inference: A[" in exec_fields


def test_tool_call_parsers_are_the_wheels_and_include_kimi_k2(wheel: zipfile.ZipFile):
    theirs = _list_assigned(wheel, "sglang/srt/function_call/parser_names.py", "TOOL_CALL_PARSER_NAMES")
    assert list(sglang_choices.TOOL_CALL_PARSERS) == ["auto", *theirs]
    assert "kimi_k2" in theirs


def test_disable_cuda_graph_is_deprecated_for_the_per_phase_backends(wheel: zipfile.ZipFile):
    server_args = wheel.read("sglang/srt/server_args.py").decode()
    assert '"--disable-cuda-graph",\n            action=DeprecatedStoreTrueAction,' in server_args
    assert 'new_flag="--cuda-graph-backend-{decode,prefill}=disabled"' in server_args
    graph = wheel.read("sglang/srt/model_executor/cuda_graph_config.py").decode()
    assert 'ALL = (FULL, BREAKABLE, DISABLED)' in graph and 'DISABLED = "disabled"' in graph
    assert sglang_choices.CUDA_GRAPH_BACKENDS == ("full", "breakable", "disabled")
    fields = wheel.read("sglang/srt/arg_groups/fields/exec_.py").decode()
    assert "cuda_graph_backend_decode: A[" in fields and "cuda_graph_backend_prefill: A[" in fields


def test_the_keys_are_read_from_arguments_only_and_logged_at_startup(wheel: zipfile.ZipFile):
    """Why the unit passes them through the launcher: no environment variable, and a startup log line."""
    serving = wheel.read("sglang/srt/arg_groups/fields/serving.py").decode()
    assert "api_key: A[" in serving and "admin_api_key: A[" in serving
    sources = [n for n in wheel.namelist() if n.endswith(".py")]
    assert not any(b"SGLANG_API_KEY" in wheel.read(n) for n in sources)
    engine = wheel.read("sglang/srt/entrypoints/engine.py").decode()
    assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in engine
    assert "return redact_watermark_secrets(server_args.resolved_dict())" in engine


def test_dflash_caps_running_requests_at_48(wheel: zipfile.ZipFile):
    hook = wheel.read("sglang/srt/arg_groups/speculative_hook.py").decode()
    assert "max_running_requests=48," in hook
    state = wheel.read("sglang/srt/managers/scheduler_components/internal_state.py").decode()
    assert 'state["effective_max_running_requests_per_dp"] = scheduler.max_running_requests' in state

