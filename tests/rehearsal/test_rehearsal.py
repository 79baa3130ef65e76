"""The operator's own inventories, rehearsed: the shipped inventory/ct200 and inventory/b300, unchanged, on the test
host through a thin overlay (tests/rehearsal/<inventory>/: connection, engine simulated, GPU stand-ins, install
sources; test_overlay.py holds it to that list), with the API key in Ansible Vault, an admin key, the shipped
0.0.0.0 bind in the test host's own network namespace (reached at 10.89.117.10, never on loopback) and TLS off.

On each: site.yml and the OpenAI client's default request (no temperature) with the key; a sweep of 3 configs
(ct200) or 4 (b300), one of which fails (ct200's to start, b300's its lossless gate), with both losslessness checks
(greedy, sampled) judged on the keyed server (ct200's on the default --lossless-restart separate, b300's shared),
and what the host ran for it read from each restart's own /server_info echo and the journal (more starts than the
unit's StartLimitBurst in one run, every good config still served; the failing config rolled back or failed by its
gate; the restore). ct200 also runs the tuner with --lossless-restart shared at the smallest budget that mode
accepts, 5 restarts (the baseline, the inventory's config twice, one candidate, the restore), then the gates (the
sampled one against that sweep's baseline samples) and the benchmark by hand with the key from the vault; b300
repeats neither, since both read an inventory, its vault and its overlay the same way and none of them reads what
differs between the two (the GPUs, the fabric, the lossless mode of the sweep). collect.yml through a vaulted
inventory is REPRODUCE.md's step 6 (test_reproduce.py checks its checksums on the host). Neither key may appear in a
result, plan, log, artifact, the host's journal or any process's command line. ct200 adds the attention-backend
refusal on its SM120 GPUs and a host leased to another run; b300 runs on B300 stand-ins with the NVSwitch fabric.

With the inventory read by ``ansible-inventory --list`` (no templating), the client sends the text of
``{{ vault_sglang_service_api_key | default('') }}`` and every config of the sweep fails with 401.
Runs with SGLANG_REHEARSAL=1 (make rehearsal).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from repro_py import spec_config
from repro_py.sweep.lossless_restart import restarts_of
from tests.rehearsal.rehearsal_host import (
    BIN,
    NAME,
    PASSWORD_FILE,
    ROOT,
    ProcessWatch,
    files_with,
    gpu_profile,
    in_host,
    run,
    vault_keys,
)

pytestmark = pytest.mark.testhost

#: Each inventory's failing config: ct200's fails to start and is rolled back, b300's serves garbled output
#: and fails the lossless gate.
FAILING = {
    "ct200": ({"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8,
               "sim_fault": "crash-on-load"}, "ddtree-b8-t4-w2048-bs8-fault-crash-on-load", "failed_to_start"),
    "b300": ({"algorithm": "ddtree", "budget": 16, "topk": 4, "window": 2048, "block_size": 8,
              "sim_fault": "mask-offset"}, "ddtree-b16-t4-w2048-bs8-fault-mask-offset", "gate_failed"),
}  # fmt: skip


def grid(inventory: str) -> dict[str, list[dict[str, object]]]:
    """The baseline, DDTree, the failing config; b300's also DFlash. ct200's separate mode restarts each good config
    twice, so its three configs already start the unit 5 times, more than its StartLimitBurst (3); a DFlash restart
    on a test host is b300's and the fleet's (tests/fleet/test_fleet_sweep_testhost.py)."""
    configs = [{"algorithm": "none"}, {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
               FAILING[inventory][0]]  # fmt: skip
    if inventory == "b300":  # shared: one start per config, 4 configs for more starts than the burst
        configs.append({"algorithm": "dflash", "window": 2048, "block_size": 8})
    return {"configs": configs}
SPACE = {"configs": [{"algorithm": "none"}], "grid": {"algorithm": ["ddtree"], "budget": [5, 8], "topk": [4],
                                                      "window": [2048], "block_size": [8]}}  # fmt: skip
BENCH = ["--bench-contexts", "60", "--bench-concurrency", "1", "--repeats", "1", "--max-tokens", "32"]
#: Where each sweep's lossless gate runs: ct200's sweep on the default (separate: each config that reaches its
#: gates restarted as deployed, then with deterministic inference for the lossless gate, both keyed); b300's
#: shared (one restart per config), as REPRODUCE.md's step-5 sweep runs, since no figure of it matters here.
LOSSLESS = {"ct200": ("separate", "own"), "b300": ("shared", "shared")}
#: The tuner with --lossless-restart shared at the smallest budget that mode accepts (5: the baseline, the
#: current config and its repeated restart, one candidate, the restore); its figures do not matter here, the
#: operator's path through it (vault, keys, lease, restore) does. The tuner through production's path, interrupted
#: and resumed, is the fleet's test (tests/fleet/test_fleet_tune_testhost.py); the default mode's counting is
#: tests/tune/test_lossless_restart.py's.
TUNE = ["--objective", "single-stream", "--max-restarts", "5", "--lossless-restart", "shared", "--screen-tokens",
        "16", "--max-tokens", "32", "--repeats", "1", "--no-write"]  # fmt: skip
#: The OpenAI client's default request (no temperature: sglang's 1.0), which readiness demands be answered.
DEFAULT_REQUEST = {"model": "kimi-k2.6", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 16}
FAST = ["-e", "sglang_service_sim_speed=50"]
VAULT = ["--vault-password-file", str(PASSWORD_FILE)]
TIMES: dict[str, float] = {}


def sources(inventory: str) -> list[str]:
    return [f"inventory/{inventory}", "-i", f"tests/rehearsal/{inventory}"]


def http(url: str, key: str | None = None, body: dict[str, object] | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def timed(name: str, started: float) -> None:
    TIMES[name] = round(time.monotonic() - started, 1)
    print(f"rehearsal: {name} {TIMES[name]} s")


def tune(inventory: str, results: Path, tool: list[str], logs: Path) -> None:
    """The tuner (--lossless-restart shared, 5 restarts) through the inventory, vaulted."""
    t = time.monotonic()
    space = results / f"{inventory}-space.yml"
    space.write_text(yaml.safe_dump(SPACE))
    out = run([*tool, "repro_py.tune", *sources(inventory), *VAULT, "--space", str(space), *TUNE, "--results",
               str(results), "--run-id", f"rehearsal-tune-{inventory}", *FAST],
              logs / "tune.log", timeout=1500)  # fmt: skip
    tuned = results / f"rehearsal-tune-{inventory}"
    assert json.loads((tuned / "configs" / "baseline.json").read_text())["status"] == "ok"
    assert "restart budget reached: 4 of 5 restarts used plus the final restore" in out, out[-2000:]
    timed(f"{inventory} tuner (5 restarts, --lossless-restart shared)", t)


def gates_and_bench_by_hand(inventory: str, results: Path, run_id: str, tool: list[str], logs: Path) -> None:
    """The gates (the sampled one against the sweep's baseline samples) and the benchmark by hand, vault keys."""
    t = time.monotonic()
    gates = results / f"{inventory}-gates.json"
    run([*tool, "repro_py.gates", "-i", *sources(inventory), *VAULT, "--expect",
         "budget=8,topk=4,window=2048,block_size=8", "--lossless-tokens", "16", "--sampled-reference",
         str(results / run_id / "sampled-reference.json"), "--out", str(gates)],
        logs / "gates.log", expect_rc=None)  # fmt: skip
    judged = json.loads(gates.read_text())
    assert judged["config_echo"]["passed"], judged["config_echo"]
    # the deployed config (restored, no deterministic inference) against the sweep's baseline samples
    assert judged["sampled"]["verdict"] == "same_distribution", judged["sampled"]
    bench = results / f"{inventory}-bench.json"
    run([*tool, "repro_py.bench", "-i", *sources(inventory), *VAULT, "--contexts", "60", "--concurrency", "1",
         "--repeats", "1", "--max-tokens", "16", "--out", str(bench)], logs / "bench.log")  # fmt: skip
    cell = json.loads(bench.read_text())["cells"][0]
    assert cell["status"] == "ok" and cell["notes"] == [], cell  # the cache flushed with the admin key
    timed(f"{inventory} gates + bench by hand", t)


def what_the_host_ran(inventory: str, run_dir: Path, docs: dict[str, dict[str, Any]]) -> None:
    """The sweep as the host ran it, read from each restart's own /server_info echo and the unit's journal.

    On the default ``--lossless-restart separate`` (ct200) the figures come from the unit as the inventory
    deploys it (no deterministic inference) and the lossless gate has a restart of its own (another invocation
    and unit file, deterministic inference on, its server log from that invocation's journal); on ``shared``
    (b300) one restart, with deterministic inference, serves both. Either way the unit is started more often
    than its StartLimitBurst within its StartLimitIntervalSec, and every good config is still served (systemd
    >= 255 keeps the start count across daemon-reload). The failing config: ct200's rolled back to the last good
    unit with the journal lines that say why and no gate restart; b300's garbled output failed by the lossless
    gate. The restore: the inventory's default config as deployed, never with the gate's deterministic
    inference.
    """
    mode, _ = LOSSLESS[inventory]
    good = {k: d for k, d in docs.items() if d["status"] == "ok"}
    deterministic = mode == "shared"  # shared: the one restart carries the gate's deterministic inference
    for label, doc in good.items():
        assert doc["engine"]["deterministic_inference"] is deterministic, label
        echo = doc["reconfigure"]["server_info_echo"]
        assert doc["reconfigure"]["time_to_ready_s"] > 0, label
        assert echo["enable_deterministic_inference"] is deterministic, label
        lossless = doc["gates"]["lossless"]
        if mode == "separate":
            gate = doc["lossless_reconfigure"]
            assert gate["status"] == "ready" and gate["server_info_echo"]["enable_deterministic_inference"] is True
            assert gate["invocation_id"] != doc["reconfigure"]["invocation_id"] and gate["time_to_ready_s"] > 0
            assert gate["unit_sha256"] != doc["reconfigure"]["unit_sha256"], label
            assert lossless["deterministic"]["server"] is True, lossless
            assert lossless["server_log"]["source"] == f"journal of invocation {gate['invocation_id']}", lossless
        else:
            assert "lossless_reconfigure" not in doc, label
    restarts = sum(restarts_of(d) for d in docs.values())
    burst = int(in_host("systemctl", "show", "sglang-k26-ddtree", "-p", "StartLimitBurst", "--value"))
    # separate: two restarts for each config that reaches its gates, one for the config that never serves
    assert restarts == (2 * len(good) + 1 if mode == "separate" else len(docs)) and restarts > burst, (restarts, burst)
    failing = docs[FAILING[inventory][1]]
    if inventory == "ct200":  # fails to start: rolled back, the journal's lines in its failure, no gate restart
        assert failing["reconfigure"]["status"] == "rolled_back", failing["reconfigure"]
        assert any("crash-on-load" in line for line in failing["failure"]["journal"]), failing["failure"]
        assert "lossless_reconfigure" not in failing
    else:  # serves garbled output: the lossless gate fails it
        assert "lossless" in failing["failure"]["reason"], failing["failure"]
        assert failing["gates"]["lossless"]["verdict"] in ("diverged", "server_log"), failing["gates"]["lossless"]
    summary = (run_dir / "summary.md").read_text()
    assert summary.startswith("# SIMULATED") and f"| {FAILING[inventory][1]} | " in summary
    for png in ("tps_vs_concurrency", "acceptance_vs_budget", "pareto"):
        assert (run_dir / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    state = json.loads((run_dir / "state.json").read_text())
    restore = state["restore"]
    assert state["status"] == "complete" and restore["status"] == "ok", restore
    default = json.loads((run_dir / "plan.json").read_text())["default_config"]  # the inventory's, as the plan read it
    assert restore["label"] == spec_config.validate(default).label, (restore["label"], default)
    assert restore["server_info_echo"]["enable_deterministic_inference"] is False, restore


def rehearse(inventory: str, address: str, results: Path, *, tuner_and_tools: bool) -> None:
    key, admin = vault_keys(inventory)
    play = [str(BIN / "ansible-playbook"), "-i", *sources(inventory), *VAULT]
    tool = [sys.executable, "-m"]
    logs = results / f"{inventory}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    base = f"http://{address}:30001"
    with ProcessWatch() as watch:
        t = time.monotonic()
        out = run([*play, "site.yml"], logs / "site.log", timeout=1500)
        assert "failed=0" in out
        timed(f"{inventory} site.yml", t)

        # the shipped 0.0.0.0 bind, reached from the controller at the test host's own address, keyed
        assert http(f"{base}/health")[0] == 200
        assert http(f"{base}/v1/models")[0] == 401
        status, models = http(f"{base}/v1/models", key)
        assert status == 200 and '"kimi-k2.6"' in models
        assert http(f"{base}/flush_cache", key, {})[0] == 401  # an admin route: the inference key cannot
        assert http(f"{base}/flush_cache", admin, {})[0] == 200
        assert http(f"{base}/v1/chat/completions", None, DEFAULT_REQUEST)[0] == 401
        status, answer = http(f"{base}/v1/chat/completions", key, DEFAULT_REQUEST)
        message = json.loads(answer)["choices"][0]["message"]  # kimi_k2's reasoning parser: reasoning first
        assert status == 200 and (message["content"] or message["reasoning_content"]), answer
        listening = in_host("ss", "-Hltn", "sport = :30001")
        assert "0.0.0.0:30001" in listening, listening

        t = time.monotonic()
        grid_file = results / f"{inventory}-grid.yml"
        grid_file.write_text(yaml.safe_dump(grid(inventory)))
        run_id = f"rehearsal-{inventory}"
        mode, gate_restart = LOSSLESS[inventory]
        out = run([*tool, "repro_py.sweep", *sources(inventory), *VAULT, "--grid", str(grid_file), "--results",
                   str(results), "--run-id", run_id, "--lossless-restart", mode, *BENCH, *FAST], logs / "sweep.log",
                  timeout=1500)  # fmt: skip
        docs = {p.stem: json.loads(p.read_text()) for p in (results / run_id / "configs").glob("*.json")}
        failed = {k: v["failure"]["class"] for k, v in docs.items() if v["status"] != "ok"}
        assert failed == {FAILING[inventory][1]: FAILING[inventory][2]}, (failed, out[-3000:])
        configs = len(grid(inventory)["configs"])
        assert len(docs) == configs and all(d["engine"]["kind"] == "simulated" for d in docs.values())
        # both losslessness checks judged on the keyed server: the greedy one on its restart, the sampled one
        # against the baseline's samples (sampled-reference.json)
        good = {k: d for k, d in docs.items() if d["status"] == "ok"}
        assert {d["gates"]["lossless"]["restart"] for d in good.values()} == {gate_restart}, good
        sampled = {k: d["gates"]["sampled"]["verdict"] for k, d in good.items()}
        assert sampled == {k: "reference" if k == "baseline" else "same_distribution" for k in good}, sampled
        assert json.loads((results / run_id / "plan.json").read_text())["endpoint"] == base
        what_the_host_ran(inventory, results / run_id, docs)
        check = subprocess.run(["sha256sum", "-c", "--quiet", "MANIFEST.sha256"], cwd=results / run_id, check=False)
        assert check.returncode == 0
        timed(f"{inventory} sweep ({configs} configs, --lossless-restart {mode})", t)

        if tuner_and_tools:
            tune(inventory, results, tool, logs)
            gates_and_bench_by_hand(inventory, results, run_id, tool, logs)

    secrets = [key, admin]
    assert not files_with(results, secrets)
    assert not [cmd for cmd in watch.seen if key in cmd or admin in cmd], "a key was on a command line"
    journal = in_host("journalctl", "--no-pager", "-o", "cat")
    assert key not in journal and admin not in journal
    ps = in_host("ps", "-eo", "args")
    assert key not in ps and admin not in ps


def test_ct200(weights: str, results_root: Path) -> None:
    testhost = weights
    rehearse("ct200", testhost, results_root, tuner_and_tools=True)
    key, _ = vault_keys("ct200")
    logs = results_root / "ct200-logs"
    play = [str(BIN / "ansible-playbook"), "-i", *sources("ct200"), *VAULT]
    serving = in_host("systemctl", "show", "sglang-k26-ddtree", "-p", "InvocationID", "--value")
    # fa3 on the RTX PRO 6000's SM120: refused before the stop, naming what the host can run
    out = run([*play, "playbooks/reconfigure.yml", "-e", "sglang_service_attention_backend=fa3"],
              logs / "fa3.log", expect_rc=2)  # fmt: skip
    text = " ".join(out.split())
    assert "attention backend fa3 cannot run here" in text and "compute capability 12.0" in text, text[-3000:]
    assert "This host can run: triton" in text
    assert in_host("systemctl", "show", "sglang-k26-ddtree", "-p", "InvocationID", "--value") == serving
    assert http(f"http://{testhost}:30001/v1/models", key)[0] == 200

    # the host leased to another run: site.yml is refused before any role touches the host
    holder = {"kind": "sweep other-run", "controller_host": "another-controller", "pid": 4242}
    lease = [*play, "playbooks/lease.yml", "-e", "sglang_service_lease_id=other-run"]
    run([*lease, "-e", json.dumps({"sglang_service_lease_holder": holder})], logs / "lease-take.log")
    try:
        out = run([*play, "site.yml"], logs / "site-leased.log", expect_rc=2)
    finally:
        run([*lease, "-e", "sglang_service_lease_state=released"], logs / "lease-release.log")
    assert "leased to sweep other-run" in " ".join(out.split())
    on_host = re.findall(r"^TASK \[(.*?)\]", out.split("PLAY [Preflight, install and run the service]")[1], re.M)
    role = "ddtree.sglang.sglang_service : "
    # the shared defaults' argument check (roles/ddtree_defaults, a dependency) runs on the controller
    shared = "ddtree.sglang.ddtree_defaults : Validating arguments against arg spec 'main'"
    touched = [t for t in on_host[1:] if not t.startswith(shared)]
    assert on_host[0] == "Gathering Facts" and all(t.startswith(role) for t in touched), on_host
    assert any("Refuse, the host is leased" in t for t in on_host)


def test_b300(weights: str, results_root: Path) -> None:
    testhost = weights
    # B300 SXM6 stand-ins (compute capability 10.3); fabric manager and NVLSM: REPRODUCE.md step 0's, else stand-ins
    gpu_profile("b300", fabric=in_host("sh", "-c", "command -v nv-fabricmanager || true").strip() == "")
    rehearse("b300", testhost, results_root, tuner_and_tools=False)
    site = " ".join((results_root / "b300-logs" / "site.log").read_text().split())
    driver = json.loads(in_host("cat", "/etc/fake-nvidia/state.json"))["driver_version"]
    assert f"fabric manager {driver} (/usr/bin/nv-fabricmanager) active, 8 GPUs registered with the fabric" in site
    assert "After=" in in_host("cat", "/etc/systemd/system/sglang-k26-ddtree.service.d/50-nvidia-fabric.conf")


def test_times(results_root: Path) -> None:
    """The rehearsal's wall time per step (results/<...>/rehearsal-times.json), printed for the report."""
    if not TIMES:
        pytest.skip("the rehearsal did not run")
    (results_root / "rehearsal-times.json").write_text(json.dumps(TIMES, indent=2) + "\n")
    print(json.dumps(TIMES, indent=2), f"\nrehearsal: {sum(TIMES.values()):.0f} s in the steps above ({NAME})")
    assert Path(ROOT / "inventory" / "ct200").is_dir()
