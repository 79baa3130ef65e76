"""Unit tests of the host-side modules' decision logic (no systemd needed)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import ROOT, load_module

pytest.importorskip("ansible")

wait = load_module("sglang_wait_ready", ROOT / "plugins/modules/sglang_wait_ready.py")
stop = load_module("sglang_stop_wait", ROOT / "plugins/modules/sglang_stop_wait.py")
plugin = load_module("ddtree_validate_plugin", ROOT / "plugins/action/ddtree_validate.py")


def state(previous="old"):
    return {"require_new": True, "previous": previous, "invocation": None}


def props(**kw):
    base = {"ActiveState": "active", "SubState": "running", "MainPID": "42", "InvocationID": "new", "Result": "success"}
    return {**base, **kw}


def test_old_invocation_is_never_ready():
    st = state()
    with pytest.raises(wait.NotReady):
        wait.check_unit(props(InvocationID="old"), st)
    assert st["invocation"] is None


def test_failed_without_new_invocation_fails_at_once():
    with pytest.raises(wait.EngineFailed, match="no new invocation"):
        wait.check_unit(props(InvocationID="old", ActiveState="failed", SubState="failed"), state())


@pytest.mark.parametrize(
    ("active", "sub"), [("activating", "auto-restart"), ("failed", "failed"), ("inactive", "dead")]
)
def test_exit_of_the_new_invocation_fails_at_once(active, sub):
    with pytest.raises(wait.EngineFailed, match="exited") as exc:
        wait.check_unit(props(ActiveState=active, SubState=sub, Result="exit-code"), state())
    assert exc.value.invocation_id == "new"


def test_a_restart_during_startup_is_a_failure():
    st = state()
    wait.check_unit(props(InvocationID="first"), st)
    with pytest.raises(wait.EngineFailed, match="restarted"):
        wait.check_unit(props(InvocationID="second"), st)


def test_probe_without_restart_accepts_the_running_invocation():
    st = {"require_new": False, "previous": "", "invocation": None}
    wait.check_unit(props(InvocationID="same"), st)
    assert st["invocation"] == "same"


def test_echo_comparison_names_each_mismatch():
    info = {"speculative_ddtree_budget": 8, "speculative_draft_window_size": None, "speculative_algorithm": "DFLASH"}
    assert wait.compare_echo(info, {"speculative_ddtree_budget": 8, "speculative_algorithm": "DFLASH"}) == []
    assert wait.compare_echo(info, {"speculative_ddtree_budget": "8"}) == []
    problems = wait.compare_echo(info, {"speculative_ddtree_budget": 12, "speculative_draft_window_size": 2048})
    assert problems == [
        "speculative_ddtree_budget: configured 12, server reports 8",
        "speculative_draft_window_size: configured 2048, server reports None",
    ]


def test_start_time_is_monotonic_seconds():
    assert wait.start_monotonic({"ExecMainStartTimestampMonotonic": "2500000"}) == 2.5
    assert wait.start_monotonic({"ExecMainStartTimestampMonotonic": "0"}) is None


def test_alive_ignores_missing_pids(tmp_path: Path):
    assert stop.alive(2**22 + 12345) is False


def test_merge_keeps_explicit_and_drops_unused_defaults():
    defaults = {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8}
    assert plugin.merge_short_keys({"budget": "12", "topk": None}, defaults) == {
        "algorithm": "ddtree",
        "budget": "12",
        "topk": 4,
        "window": 2048,
        "block_size": 8,
    }
    assert plugin.merge_short_keys({"algorithm": "dflash"}, defaults) == {
        "algorithm": "dflash",
        "window": 2048,
        "block_size": 8,
    }
    assert plugin.merge_short_keys({"algorithm": "none"}, defaults) == {"algorithm": "none"}
    assert plugin.merge_short_keys({"algorithm": "dflash", "budget": 8}, defaults)["budget"] == 8


def test_read_vars_reads_the_short_keys_and_role_variables_by_the_contract_s_names():
    """resolve.yml spells no field: the action reads each short key (given or not) and each role variable that
    is defined, by the names in spec_config.FIELDS."""
    task_vars = {"budget": "12", "window": None, "sglang_service_ddtree_budget": 8, "sglang_service_block_size": 16,
                 "sglang_service_spec_algorithm": "dflash", "topk_cap": 3, "sglang_service_port": 30000}  # fmt: skip
    explicit, config = plugin.contract_vars(task_vars)
    assert explicit == {"algorithm": None, "budget": "12", "topk": None, "window": None, "block_size": None}
    assert config == {"algorithm": "dflash", "budget": 8, "block_size": 16}
    assert plugin.merge_short_keys(explicit, config) == {"algorithm": "dflash", "budget": "12", "block_size": 16}


def test_read_vars_is_a_real_boolean_and_excludes_the_explicit_arguments():
    from types import SimpleNamespace  # noqa: PLC0415

    action = SimpleNamespace(_templar=SimpleNamespace(template=lambda value: value))  # nothing to template here
    short_keys = plugin.ActionModule._short_keys
    task_vars = {"topk": 6, "sglang_service_ddtree_topk": 4}
    assert short_keys(action, {"read_vars": True}, task_vars)[1] == {"topk": 4}
    assert short_keys(action, {"explicit": {"topk": 5}}, task_vars) == ({"topk": 5}, {})
    assert short_keys(action, {"read_vars": "yes"}, task_vars) == "read_vars='yes' must be a real boolean"
    assert short_keys(action, {"read_vars": True, "config": {}}, task_vars) == (
        "read_vars reads 'explicit' and 'config' from the play's variables; give either read_vars or them"
    )


def _dicts(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _dicts(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dicts(item)


def test_every_readiness_wait_returns_the_contract_s_echo_keys():
    """The host module cannot import the contract: each wait gets its echo keys from what resolve.yml kept of
    the action's result."""
    import yaml  # noqa: PLC0415

    def waits(node):
        if isinstance(node, dict):
            if "ddtree.sglang.sglang_wait_ready" in node:
                yield node["ddtree.sglang.sglang_wait_ready"]
            for value in node.values():
                yield from waits(value)
        elif isinstance(node, list):
            for item in node:
                yield from waits(item)

    tasks = ROOT / "roles/sglang_service/tasks"
    # the module_defaults on service.yml's import (main.yml) give every wait its echo keys; no wait overrides them
    main = yaml.safe_load((tasks / "main.yml").read_text())
    (defaults,) = [node["ddtree.sglang.sglang_wait_ready"] for node in _dicts(main) if node is not None
                   and "ddtree.sglang.sglang_wait_ready" in node and "unit" in node["ddtree.sglang.sglang_wait_ready"]]
    assert defaults["echo_keys"] == "{{ _sglang_service_spec_echo_keys }}"
    found = [w for name in ("service.yml", "rollback.yml") for w in waits(yaml.safe_load((tasks / name).read_text()))]
    assert len(found) == 4 and all("echo_keys" not in w for w in found), found
    resolve = (tasks / "resolve.yml").read_text()
    assert '_sglang_service_spec_echo_keys: "{{ _sglang_service_validated.echo_keys }}"' in resolve


# ---- GPU state: held memory, compute mode, MIG ---------------------------------------------------

gpu = load_module("sglang_gpu_state", ROOT / "plugins/modules/sglang_gpu_state.py")
pre = load_module("sglang_precheck", ROOT / "plugins/module_utils/sglang_precheck.py")

SMI_GPUS = (
    "0, GPU-a, NVIDIA RTX PRO 6000, 15, 97887, Default, Disabled, Disabled\n"
    "1, GPU-b, NVIDIA RTX PRO 6000, 80512, 97887, Default, [N/A], [N/A]\n"
)
SMI_APPS = "4242, GPU-b, 80000, /opt/sglang/venv/bin/python\n777, GPU-b, [N/A], python, with, commas\n"


def test_nvidia_smi_csv_is_parsed_with_na_values():
    gpus = gpu.parse_gpus(SMI_GPUS)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1]["memory_used_mib"] == 80512 and gpus[1]["mig_current"] == "[N/A]"
    apps = gpu.parse_apps(SMI_APPS)
    python = "/opt/sglang/venv/bin/python"
    assert apps[0] == {"pid": 4242, "gpu_uuid": "GPU-b", "used_mib": 80000, "process_name": python}
    assert apps[1]["used_mib"] is None and apps[1]["process_name"] == "python, with, commas"


def _problems(gpus, apps=(), targets=(0, 1), *, allowed=(), modes=("Default",)):
    return gpu.problems_of(
        list(gpus), list(apps), list(targets), allowed=set(allowed), max_unattributed=1024, modes_allowed=list(modes)
    )


def _gpu(index, used=0, mode="Default", mig="Disabled", pending="Disabled"):
    return {"index": index, "uuid": f"GPU-{index}", "name": "G", "memory_used_mib": used, "memory_total_mib": 97887,
            "compute_mode": mode, "mig_current": mig, "mig_pending": pending}  # fmt: skip


def test_the_units_own_processes_may_hold_memory_nothing_else_may():
    gpus = [_gpu(0), _gpu(1, used=80512)]
    apps = [{"pid": 4242, "gpu_uuid": "GPU-1", "used_mib": 80000, "process_name": "python"}]
    assert _problems(gpus, apps, allowed={4242}) == []
    problems = _problems(gpus, apps, allowed={1})
    assert problems == ["GPU 1 (G, GPU-1): 80000 MiB held by pid 4242 (python), not a process of this service"]


def test_memory_no_process_accounts_for_is_refused():
    problems = _problems([_gpu(0, used=30000), _gpu(1)])
    assert len(problems) == 1 and "30000 MiB in use that no listed process accounts for" in problems[0]
    assert _problems([_gpu(0, used=1024), _gpu(1)]) == []  # the tolerance


@pytest.mark.parametrize(
    ("mode", "words"),
    [("Prohibited", "no process may create a CUDA context"), ("Exclusive_Process", "one process may hold a context")],
)
def test_compute_modes_that_stop_the_server_are_refused(mode, words):
    problems = _problems([_gpu(0), _gpu(1, mode=mode)])
    assert len(problems) == 1 and f"GPU 1 (G, GPU-1) compute mode is {mode}: {words}" in problems[0]
    assert _problems([_gpu(0), _gpu(1, mode=mode)], modes=("Default", mode)) == []


def test_mig_enabled_or_pending_is_refused_and_only_target_gpus_count():
    assert "MIG mode is enabled" in _problems([_gpu(0, mig="Enabled"), _gpu(1)])[0]
    assert "MIG mode is pending" in _problems([_gpu(0), _gpu(1, pending="Enabled")])[0]
    assert _problems([_gpu(0), _gpu(1, mig="Enabled", used=50000)], targets=(0,)) == []
    assert _problems([_gpu(0)], targets=(0, 3)) == ["GPU(s) [3] not found (nvidia-smi lists [0])"]


# ---- pre-checks before the running server is stopped ---------------------------------------------


def test_port_held_by_the_units_own_server_is_fine_anything_else_is_not():
    line = 'LISTEN 0 1024 127.0.0.1:31001 0.0.0.0:* users:(("python",pid=10,fd=7))'
    assert pre.port_problem(31001, [], {10}) is None
    assert pre.port_problem(31001, [(line, {10})], {10, 11}) is None
    msg = pre.port_problem(31001, [(line, {10})], {99})
    assert msg is not None and "port 31001 is held by another listener, not by this service" in msg
    unseen = pre.port_problem(31001, [("LISTEN 0 1 127.0.0.1:31001 0.0.0.0:*", set())], {10})
    assert unseen is not None and "no process visible here" in unseen


def test_bind_address_must_be_local():
    assert pre.bind_problem("0.0.0.0") is None and pre.bind_problem("127.0.0.1") is None
    assert pre.bind_problem("192.0.2.77") == "bind address '192.0.2.77' is not an address of this host"


# ---- readiness wait: the key file and the start-limit message -------------------------------------


def test_api_key_is_read_from_the_keys_file(tmp_path: Path):
    keys = tmp_path / "k.json"
    keys.write_text('{"_managed": "Ansible managed", "api_key": "k-1", "admin_api_key": null}')
    assert wait.read_api_key(str(keys)) == "k-1"
    assert wait.read_api_key(str(tmp_path / "absent.json")) == ""
    assert wait.read_api_key("") == ""


def test_a_refused_start_names_the_start_limit():
    with pytest.raises(wait.EngineFailed, match="the start limit was hit"):
        refused = props(InvocationID="old", ActiveState="failed", SubState="failed", Result="start-limit-hit")
        wait.check_unit(refused, state())


def _server(handler_status):
    """A loopback HTTP server answering /v1/chat/completions with ``handler_status`` (and what it was sent)."""
    import http.server  # noqa: PLC0415
    import json  # noqa: PLC0415
    import threading  # noqa: PLC0415

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body, self.headers.get("Authorization")))
            error = b'{"object": "error", "message": "curand_kernel.h: No such file"}'
            reply = {"choices": [{"message": {"role": "assistant", "content": "", "reasoning_content": " Two"}}],
                     "usage": {"completion_tokens": 8}}
            payload = json.dumps(reply).encode() if handler_status == 200 else error
            self.send_response(handler_status)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_readiness_sends_the_openai_clients_default_request():
    """No temperature, top_p or top_k: the server's defaults (sglang's temperature 1.0), as the OpenAI client sends
    it; only bounded in length."""
    server, seen = _server(200)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert wait.sampled_generation(base, "k-1", 10, "inv", "kimi-k2.6") == " Two"  # the reasoning: no content yet
        path, body, auth = seen[0]
        assert path == "/v1/chat/completions" and auth == "Bearer k-1"
        assert body == {"model": "kimi-k2.6", "messages": wait.SAMPLED_MESSAGES, "max_tokens": 8}
    finally:
        server.shutdown()


def test_a_failing_sampled_generation_fails_readiness_with_the_servers_words():
    server, _ = _server(500)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        failed = r"sampled generation \(the OpenAI client's default request: no temperature, sglang's 1.0\) failed: "
        with pytest.raises(wait.EngineFailed, match=failed + ".* returned 500") as exc:
            wait.sampled_generation(base, "", 10, "inv")
        assert "curand_kernel.h" in exc.value.reason
    finally:
        server.shutdown()


def test_a_server_that_refuses_sampling_fails_readiness():
    """A DDTree server built from a series that still serves greedy decoding only answers 400: not ready."""
    server, _ = _server(400)
    try:
        with pytest.raises(wait.EngineFailed, match="returned 400"):
            wait.sampled_generation(f"http://127.0.0.1:{server.server_address[1]}", "", 10, "inv")
    finally:
        server.shutdown()


# ---- readiness against the simulated engine: every algorithm serves the sampled request --------------


@pytest.fixture(scope="module")
def sim_engines(tmp_path_factory: pytest.TempPathFactory):
    from repro_py.simengine.process import start_engine  # noqa: PLC0415
    from repro_py.simengine.testing import ddtree_flags  # noqa: PLC0415

    fast = ["--sim-load-seconds", "0.1", "--sim-warmup-seconds", "0.1", "--api-key", "k-1"]
    dflash = ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8",
              "--speculative-draft-window-size", "2048"]
    engines = {
        "ddtree": start_engine([*ddtree_flags(budget=8, topk=4, window=2048, block=8), *fast],
                               model_root=tmp_path_factory.mktemp("m1")),
        "dflash": start_engine([*dflash, *fast], model_root=tmp_path_factory.mktemp("m2")),
        "none": start_engine(fast, model_root=tmp_path_factory.mktemp("m3")),
    }
    try:
        for eng in engines.values():
            eng.wait_ready(30)
        yield engines
    finally:
        for eng in engines.values():
            eng.stop(timeout=5)


@pytest.mark.parametrize("algorithm", ["ddtree", "dflash", "none"])
def test_readiness_demands_a_sampled_generation_from_every_algorithm(sim_engines, algorithm):
    """A DDTree server serves the OpenAI client's default request (sampled) like every other: readiness demands
    it from the new process instead of expecting a refusal."""
    assert wait.sampled_generation(sim_engines[algorithm].url, "k-1", 10, "inv").strip()


def test_the_role_demands_the_sampled_generation_for_every_algorithm():
    """No per-algorithm expectation is left: the module has no ``sampling`` choice and no task passes one."""
    assert "sampling" not in (ROOT / "roles/sglang_service/vars/main.yml").read_text()
    for name in ("service.yml", "rollback.yml"):
        assert "sampling:" not in (ROOT / "roles/sglang_service/tasks" / name).read_text(), name
    module = (ROOT / "plugins/modules/sglang_wait_ready.py").read_text()
    assert '"sampling"' not in module and "  sampling:" not in module


# ---- one echo comparison: the host module and the sweep's gate agree ---------------------------------


@pytest.mark.parametrize(
    "reported",
    [
        {"speculative_algorithm": "DFLASH", "speculative_ddtree_budget": 8, "speculative_ddtree_topk_cap": 4,
         "speculative_dflash_block_size": 8, "speculative_draft_window_size": 2048},
        {"speculative_algorithm": "DDTREE", "speculative_ddtree_budget": "8", "speculative_ddtree_topk_cap": 4,
         "speculative_dflash_block_size": 8, "speculative_draft_window_size": None},
        {"speculative_algorithm": "DFLASH", "speculative_ddtree_budget": None, "speculative_ddtree_topk_cap": None,
         "speculative_dflash_block_size": 16, "speculative_draft_window_size": 2048},
        {"speculative_algorithm": "", "speculative_dflash_block_size": 8},
        {},
    ],
)
@pytest.mark.parametrize(
    "short",
    [{"budget": 8, "topk": 4, "window": 2048, "block_size": 8}, {"algorithm": "dflash", "window": 2048},
     {"algorithm": "none"}],
)  # fmt: skip
def test_the_readiness_echo_check_and_the_sweep_gate_are_one_check(reported, short):
    """The role's readiness check and the sweep's gate used to hold two rules (the gate took DDTREE
    for DFLASH and ignored a DFLASH chain's top-K); both now compare with the contract's echo."""
    from repro_py import spec_config  # noqa: PLC0415
    from repro_py.bench.server_info import ServerInfo  # noqa: PLC0415
    from repro_py.gates.echo import check_echo  # noqa: PLC0415

    cfg = spec_config.validate(short)
    expected = spec_config.expected_echo(cfg)
    host_side = wait.compare_echo(reported, expected)
    gate = check_echo(ServerInfo(raw=reported, path="/server_info"), cfg)
    assert [p.split(":")[0] for p in host_side] == [m.field for m in gate]
    assert [k for k, _, _ in spec_config.echo_differences(reported, expected)] == [m.field for m in gate]


# ---- the stop job's GPU wait ----------------------------------------------------------------------


class _Failed(Exception):
    pass


class _FakeModule:
    def fail_json(self, **kw):
        raise _Failed(kw)


def _fake_smi(tmp_path: Path, held_reads: int) -> str:
    """An nvidia-smi whose GPU 1 is held by pid 4242 for the first HELD_READS reads, then free."""
    counter = tmp_path / "reads"
    counter.write_text("0")
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        f"""#!/bin/sh
n=$(cat {counter})
case "$1" in
  --query-gpu=*) echo $((n + 1)) > {counter}
     echo "0, GPU-a, G, 0, 97887, Default, Disabled, Disabled"
     if [ "$n" -lt {held_reads} ]; then used=80000; else used=0; fi
     echo "1, GPU-b, G, $used, 97887, Default, Disabled, Disabled" ;;
  --query-compute-apps=*) if [ "$n" -le {held_reads} ]; then echo "4242, GPU-b, 80000, python"; fi ;;
esac
"""
    )
    smi.chmod(0o755)
    return str(smi)


def _stop_params(smi: str, timeout: float = 10.0) -> dict:
    return {"unit": "u", "timeout": timeout, "poll_interval": 0.05, "gpus": [0, 1], "gpu_required": True,
            "gpu_memory_used_max_mib": 1024, "gpu_compute_modes_allowed": ["Default"], "nvidia_smi": smi}  # fmt: skip


def test_the_stop_job_waits_until_the_gpus_are_free(tmp_path: Path):
    smi = _fake_smi(tmp_path, held_reads=3)
    result: dict = {}
    stop.wait_for_gpus(_FakeModule(), _stop_params(smi), time.monotonic() + 10, result)
    assert result["gpu_checked"] is True and result["gpu_free_waited_s"] > 0
    assert int((tmp_path / "reads").read_text()) == 4  # three held reads, then the free one


def test_the_stop_job_fails_naming_what_still_holds_the_gpu(tmp_path: Path):
    smi = _fake_smi(tmp_path, held_reads=10**6)
    with pytest.raises(_Failed) as failed:
        stop.wait_for_gpus(_FakeModule(), _stop_params(smi, timeout=0.3), time.monotonic() + 0.3, {})
    msg = failed.value.args[0]["msg"]
    assert "not free 0 s after the stop of u" in msg and "80000 MiB held by pid 4242 (python)" in msg


def test_the_stop_job_requires_nvidia_smi_when_told(tmp_path: Path):
    with pytest.raises(_Failed) as failed:
        stop.wait_for_gpus(_FakeModule(), _stop_params(str(tmp_path / "absent")), time.monotonic() + 1, {})
    assert "is not installed" in failed.value.args[0]["msg"]
