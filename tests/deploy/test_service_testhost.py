"""The service on the deployed systemd test host (Ubuntu 24.04, systemd 255), through playbooks/reconfigure.yml.

Each test drives one failure a real GPU host meets and checks the behaviour,
not the configuration: the start limit against deliberate starts and against a
crash loop, the GPU device nodes opened as the service user inside the unit's
sandbox, the API keys out of `ps`, the journal and the run's artifacts, the
refusals before a start (GPU memory held, compute mode, MIG, a taken port)
with the running server untouched, the rollback to the last good unit on ITS
port, and the drain of a stop through the main process.

The test host has no GPU: testhost/up.sh installs a stand-in nvidia-smi (its
state file drives the GPU refusals) and stand-in device nodes with the real
major numbers (an open passes every permission layer, then gets ENXIO).

Needs the deployed test host (`make deploy`), runs with SGLANG_TESTHOST=1, and
leaves the inventory's configuration serving.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, wants_testhost

pytestmark = [
    pytest.mark.testhost,
    pytest.mark.skipif(not wants_testhost(), reason="set SGLANG_TESTHOST=1 (make service-checks)"),
]

HOST = os.environ.get("TESTHOST_NAME", "sglang-testhost")
LOCAL = yaml.safe_load((ROOT / "inventory/local/group_vars/all/service.yml").read_text())
UNIT = LOCAL["sglang_service_name"]
PORT = LOCAL["sglang_service_port"]
BASE = f"http://127.0.0.1:{PORT}"
SPARE_PORT = 32001  # a port of this bundle's test range that nothing else uses
STATE = "/etc/fake-nvidia/state.json"
KEY = "k-h8-test-3b9d0f6e1a2c4785"
ADMIN = "k-h8-admin-9e7c5a3b1d0f2468"


def sh(
    *argv: str, check: bool = True, user: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """A command in the test host (as root unless ``user``)."""
    cmd = ["podman", "exec", *(["--user", user] if user else []), HOST, *argv]
    env = {**os.environ, "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({res.returncode}): {res.stdout}{res.stderr}")
    return res


def unit() -> dict[str, str]:
    out = sh("systemctl", "show", UNIT, "-p", "ActiveState", "-p", "SubState", "-p", "MainPID",
             "-p", "InvocationID", "-p", "Result", "-p", "NRestarts").stdout  # fmt: skip
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def reconfigure(tmp_path: Path, *extra: str, name: str = "run") -> tuple[int, dict[str, Any], str]:
    """playbooks/reconfigure.yml on the test host: (rc, the JSON report, the whole output)."""
    report = tmp_path / f"report-{name}.json"
    res = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "inventory/local", "playbooks/reconfigure.yml",
         "-e", f"sglang_service_report_path={report}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False, stdin=subprocess.DEVNULL,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
             "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf")},
    )  # fmt: skip
    doc = json.loads(report.read_text()) if report.exists() else {}
    return res.returncode, doc, res.stdout + res.stderr


def http(method: str, path: str, body: dict[str, Any] | None = None, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(BASE + path, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def serving(key: str | None = None) -> bool:
    """The OpenAI client's default request (no temperature: sglang's 1.0) is answered, DDTree included."""
    body = {"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    status, raw = http("POST", "/v1/chat/completions", body, key)
    return status == 200 and bool(json.loads(raw)["choices"])


@pytest.fixture(scope="module", autouse=True)
def inventory_config_at_the_end(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test starts and ends with the inventory's configuration serving."""
    tmp = tmp_path_factory.mktemp("restore")
    if unit().get("ActiveState") != "active" or not serving():
        rc, _, out = reconfigure(tmp, name="start")
        assert rc == 0, out[-3000:]
    yield
    rc, _, out = reconfigure(tmp, name="end")
    assert rc == 0, out[-3000:]


@contextlib.contextmanager
def gpu_state(change: dict[str, Any]) -> Iterator[None]:
    """Edit the stand-in nvidia-smi's state for the duration of a block."""
    original = sh("cat", STATE).stdout
    state = json.loads(original)
    for gpu_index, fields in change.get("gpus", {}).items():
        state["gpus"][gpu_index].update(fields)
    state["processes"] = change.get("processes", state["processes"])
    sh("sh", "-c", f"cat > {STATE} <<'EOF'\n{json.dumps(state)}\nEOF")
    try:
        yield
    finally:
        sh("sh", "-c", f"cat > {STATE} <<'EOF'\n{original}\nEOF")


# ---- 1. the start limit ---------------------------------------------------------------------------


def test_deliberate_starts_are_never_refused_by_the_start_limit(tmp_path: Path):
    """StartLimitBurst=3 per hour; since systemd 255 the count survives daemon-reload: 5 deliberate restarts in a row,
    each ready. Along the way, each on its own restart of the five:

    - the third: readiness demands the OpenAI client's default request (sampled, temperature 1.0) from the NEW
      process, DDTree included; the report carries what it generated, and a sampled request is served afterwards;
    - the fourth: with a 1 s sync limit the simulated stop (1 s drain) and start (3 s load) outlast their first part
      and go on as polled async jobs;
    - the fifth (the inventory's config, the limit's default): both finish in their first part, the rests skipped.
    """
    steps = [("b0", ["-e", "budget=12", "-e", "topk=4"]), ("b1", ["-e", "budget=16", "-e", "topk=4"]),
             ("sampled", ["-e", "budget=12", "-e", "topk=6"]),
             ("sync-limit", ["-e", "budget=16", "-e", "topk=4", "-e", "sglang_service_sync_wait_s=1"]),
             ("sync-default", [])]  # fmt: skip
    seen = []
    for i, (name, extra) in enumerate(steps):
        old = unit()
        rc, report, out = reconfigure(tmp_path, *extra, name=name)
        failure = f"restart {i + 1} of 5 ({name}): {report.get('failure')}\n{out[-2500:]}"
        assert rc == 0 and report["status"] == "ready", failure
        assert report["invocation_id"] != old["InvocationID"] == report["stop"]["old_invocation_id"], (name, report)
        seen.append(report["invocation_id"])
        if name == "sampled":
            _the_new_process_answered_sampled(old, report)
        elif name == "sync-limit":
            for rest in ("Go on waiting until the old server is gone (a polled async job)",
                         "Go on waiting until the NEW invocation is ready (a polled async job)"):  # fmt: skip
                outcome = _task_outcome(out, f"ddtree.sglang.sglang_service : {rest}")
                assert outcome in ("ASYNC", "changed", "ok"), out[-3000:]
            assert report["invocation_id"] == unit()["InvocationID"] and serving()
        elif name == "sync-default":
            stop_rest = "ddtree.sglang.sglang_service : Go on waiting until the old server is gone (a polled async job)"
            assert _task_outcome(out, stop_rest) == "skipping", out[-3000:]
    assert len(set(seen)) == 5
    assert unit()["Result"] == "success"


def _the_new_process_answered_sampled(old: dict[str, str], report: dict[str, Any]) -> None:
    """The NEW process answered: the old invocation stopped, a new main process, and the engine that echoes the new
    settings (budget 12, topk cap 6) is that main process; a sampled generation in the report, and after it."""
    assert report["config"]["algorithm"] == "ddtree"
    assert report["main_pid"] != int(old["MainPID"]), report
    echo = report["server_info_echo"]
    assert echo["sim"]["pid"] == report["main_pid"] == int(unit()["MainPID"]), (echo["sim"], report["main_pid"])
    assert (echo["speculative_ddtree_budget"], echo["speculative_ddtree_topk_cap"]) == (12, 6), echo
    generation = report["generation"]
    assert generation["text"] and generation["sampled_text"].strip(), generation
    assert serving()  # the default request again, after readiness


def test_a_crash_loop_is_still_stopped_by_the_start_limit(tmp_path: Path):
    """A server that crashes while serving restarts by itself (Restart=on-failure), until the limit stops it."""
    rc, report, out = reconfigure(tmp_path, "-e", "sim_fault=crash-after:2", name="crashloop")
    assert rc == 0 and report["status"] == "ready", out[-2500:]
    since = time.strftime("%Y-%m-%d %H:%M:%S")
    stopped = "Start request repeated too quickly."
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # each process dies at its 3rd generation
            http("POST", "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2, "temperature": 0}})
        if stopped in sh("journalctl", "-u", UNIT, "--since", since, "--no-pager", "-o", "cat").stdout:
            break
        time.sleep(0.5)
    time.sleep(2 * LOCAL["sglang_service_restart_sec"] + 1)  # no restart follows any more
    state = unit()
    journal = sh("journalctl", "-u", UNIT, "--since", since, "--no-pager", "-o", "cat").stdout
    assert stopped in journal, journal[-3000:]
    assert state["ActiveState"] == "failed", state
    # the deliberate start counted once, Restart=on-failure brought it back twice: StartLimitBurst=3 starts
    assert "Scheduled restart job, restart counter is at 2." in journal, journal[-3000:]
    # and the deliberate start after it (the inventory's config) is not refused
    rc, report, out = reconfigure(tmp_path, name="after-loop")
    assert rc == 0 and report["status"] == "ready", out[-2500:]


# ---- 2. GPU device nodes under the hardened unit --------------------------------------------------


def _device_check_line() -> str:
    cat = sh("systemctl", "cat", UNIT).stdout
    lines = [ln for ln in cat.splitlines() if ln.startswith("ExecStartPre=") and "sglang-device-check.py" in ln]
    assert len(lines) == 1, "the unit does not open its GPU device nodes before the start:\n" + cat
    return lines[0].removeprefix("ExecStartPre=")


def test_the_service_user_opens_every_gpu_node_inside_the_units_sandbox():
    nodes = [w for w in _device_check_line().split() if w.startswith("/dev/")]
    found = sh("sh", "-c", "ls -d /dev/nvidia*").stdout.split()
    assert sorted(nodes) == sorted(n for n in found if not n.startswith("/dev/nvidia-caps"))
    inv = unit()["InvocationID"]
    journal = sh("journalctl", f"_SYSTEMD_INVOCATION_ID={inv}", "--no-pager", "-o", "cat").stdout
    for node in nodes:
        assert f"sglang-device-check: ok   {node}: ENXIO: reachable, no driver behind it" in journal, journal
    assert f"{len(nodes)}/{len(nodes)} GPU device nodes open for sglang (groups sglang)" in journal


@pytest.mark.parametrize(
    ("setup", "sandbox", "cause"),
    [
        ("true", ["-p", "PrivateDevices=yes"], "ENOENT: missing in the unit's sandbox"),
        ("chmod 0600 /dev/nvidia3", [], "EACCES: permission denied by the node's mode/owner/group"),
    ],
    ids=["hidden-by-PrivateDevices", "mode-0600"],
)
def test_the_device_check_fails_when_the_sandbox_or_the_mode_keeps_the_user_out(
    setup: str, sandbox: list[str], cause: str
):
    """The same check, as the service user with the unit's hardening, plus one thing that breaks it."""
    command = _device_check_line().split()
    props = ["-p", "User=sglang", "-p", "Group=sglang", "-p", "NoNewPrivileges=yes", "-p", "ProtectSystem=full",
             "-p", "PrivateTmp=yes", "-p", "ProtectClock=yes", "-p", "ProtectKernelModules=yes"]  # fmt: skip
    sh("sh", "-c", setup)
    try:
        res = sh("systemd-run", "--quiet", "--wait", "--pipe", *props, *sandbox, *command, check=False)
    finally:
        sh("chmod", "0666", "/dev/nvidia3")
    assert res.returncode != 0, res.stdout + res.stderr
    assert cause in res.stdout + res.stderr


# ---- 3. the API keys: out of ps, the journal and every artifact -----------------------------------


def test_the_api_keys_never_leave_the_keys_file(tmp_path: Path):
    """As an operator keeps them: in the inventory (Vault in production); the sweep's way of running the play."""
    import ansible_runner  # noqa: PLC0415

    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").symlink_to(ROOT / "inventory/local/hosts.yml")
    (inventory / "group_vars" / "all").symlink_to(ROOT / "inventory/local/group_vars/all")
    (inventory / "host_vars" / HOST).mkdir(parents=True)  # inventory/local's connection, then the keys
    (inventory / "host_vars" / HOST / "main.yml").symlink_to(ROOT / "inventory/local/host_vars" / HOST / "main.yml")
    (inventory / "host_vars" / HOST / "keys.yml").write_text(
        yaml.safe_dump({"sglang_service_api_key": KEY, "sglang_service_admin_api_key": ADMIN,
                        "sglang_service_host": "0.0.0.0"})
    )  # fmt: skip
    private = tmp_path / "runner"
    private.mkdir()
    report = tmp_path / "report-keys.json"
    result = ansible_runner.run(
        private_data_dir=str(private), project_dir=str(ROOT), playbook=str(ROOT / "playbooks/reconfigure.yml"),
        inventory=str(inventory), quiet=True, rotate_artifacts=0,
        extravars={"sglang_service_report_path": str(report)},
        envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "CONTAINERS_CONF": str(ROOT / "testhost/containers.conf"),
                 "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert result.rc == 0, json.loads(report.read_text()).get("failure") if report.exists() else result.status
    try:
        # the server demands the keys: the API key for inference, the admin key (only) for admin routes
        assert not serving() and serving(KEY)
        assert http("POST", "/flush_cache", key=KEY)[0] == 401
        assert http("POST", "/flush_cache", key=ADMIN)[0] == 200
        # another user on the host sees the process list: no key there
        sh("sh", "-c", "id h8other >/dev/null 2>&1 || useradd --no-create-home h8other")
        pid = unit()["MainPID"]
        seen = sh("ps", "-eo", "args", user="h8other").stdout + sh("cat", f"/proc/{pid}/cmdline", user="h8other").stdout
        assert "sglang-launch.py" in seen and "repro_py.simengine" in seen
        assert KEY not in seen and ADMIN not in seen
        # the keys file is the service's and root's only
        assert sh("cat", "/etc/sglang/sglang-k26-ddtree.keys.json", user="h8other", check=False).returncode != 0
        # the journal of this invocation has the server's startup dump of its arguments, redacted
        journal = sh("journalctl", f"_SYSTEMD_INVOCATION_ID={unit()['InvocationID']}", "--no-pager", "-o", "cat").stdout
        assert "server_args=" in journal and "'api_key': '<redacted>'" in journal
        whole = sh("journalctl", "--no-pager", "-o", "cat").stdout
        assert KEY not in whole and ADMIN not in whole
        # and neither the play's output nor any artifact of the run (job events, stdout) holds them
        artifacts = [p for p in private.rglob("*") if p.is_file()]
        assert any(p.parent.name == "job_events" for p in artifacts)
        for path in [*artifacts, report]:
            data = path.read_bytes()
            assert KEY.encode() not in data and ADMIN.encode() not in data, path
    finally:
        rc, _, out = reconfigure(tmp_path, name="no-key")
        assert rc == 0, out[-3000:]
    assert serving() and sh("test", "-e", "/etc/sglang/sglang-k26-ddtree.keys.json", check=False).returncode != 0


# ---- 4. refusals before a start: GPU memory held, compute mode, MIG --------------------------------


@pytest.fixture
def stranger() -> Iterator[int]:
    """A process on the test host that is not the service's (it 'holds GPU memory' in the stand-in state)."""
    proc = sh("sh", "-c", "setsid sleep 900 >/dev/null 2>&1 & echo $!")
    pid = int(proc.stdout.strip())
    yield pid
    sh("kill", str(pid), check=False)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"processes": "STRANGER"},
         "GPU 3 (NVIDIA RTX PRO 6000 Blackwell Server Edition (stand-in), GPU-5ad0c0de-0000-4000-8000-000000000003): "
         "4096 MiB held by pid {pid} (sleep), not a process of this service"),
        ({"gpus": {2: {"compute_mode": "Prohibited"}}},
         "compute mode is Prohibited: no process may create a CUDA context on it"),
        ({"gpus": {5: {"mig_current": "Enabled"}}}, "MIG mode is enabled: CUDA sees MIG instances"),
        ({"gpus": {6: {"memory_used": 20000}}}, "20000 MiB in use that no listed process accounts for"),
    ],
    ids=["memory-held-by-another-process", "compute-mode-prohibited", "mig-enabled", "memory-nobody-accounts-for"],
)  # fmt: skip
def test_a_start_the_gpus_cannot_take_is_refused_and_the_server_keeps_serving(
    tmp_path: Path, stranger: int, change: dict[str, Any], words: str
):
    before = unit()
    if change.get("processes") == "STRANGER":
        change = {"processes": [{"pid": stranger, "gpu": 3, "used_memory": 4096}]}
    with gpu_state(change):
        rc, report, out = reconfigure(tmp_path, "-e", "budget=12", "-e", "topk=6", name="gpu")
    flat = " ".join(out.split())
    assert rc != 0 and report["status"] == "refused", flat[-2500:]
    assert words.format(pid=stranger) in report["failure"]["reason"]
    assert "was refused before the running server was touched" in flat
    assert unit()["InvocationID"] == before["InvocationID"] and unit()["ActiveState"] == "active"
    assert serving() and report["invocation_id"] == before["InvocationID"]


# ---- 7. a restart never takes a healthy service down ------------------------------------------------


def test_a_taken_port_is_refused_before_the_healthy_server_is_stopped(tmp_path: Path):
    before = unit()
    listener = sh("sh", "-c", f"setsid python3 -m http.server --bind 127.0.0.1 {SPARE_PORT} >/dev/null 2>&1 & echo $!")
    pid = listener.stdout.strip()
    try:
        deadline = time.monotonic() + 20
        while sh("ss", "-Hltn", f"sport = :{SPARE_PORT}").stdout.strip() == "" and time.monotonic() < deadline:
            time.sleep(0.2)
        rc, report, out = reconfigure(tmp_path, "-e", f"sglang_service_port={SPARE_PORT}", name="port")
    finally:
        sh("kill", pid, check=False)
    assert rc != 0 and report["status"] == "refused", " ".join(out.split())[-2500:]
    assert f"port {SPARE_PORT} is held by another listener, not by this service" in report["failure"]["reason"]
    assert f'pid={pid}' in report["failure"]["reason"]
    assert unit()["InvocationID"] == before["InvocationID"] and serving()


@contextlib.contextmanager
def drafter_config(change: dict[str, Any]) -> Iterator[None]:
    """Edit the test host's drafter config.json (inventory/local's drafter path) for the duration of a block."""
    path = LOCAL["sglang_service_drafter_path"] + "/config.json"
    original = sh("cat", path).stdout

    def write(text: str) -> None:
        sh("sh", "-c", f"printf %s {base64.b64encode(text.encode()).decode()} | base64 -d > {path}")

    write(json.dumps({**json.loads(original), **change}, indent=2) + "\n")
    try:
        yield
    finally:
        write(original)


def test_a_block_size_the_drafter_was_not_trained_at_is_refused_as_sglang_reads_it(tmp_path: Path):
    # sglang 0.5.23 takes dflash_config.block_size before a top-level block_size (parse_dflash_draft_config):
    # this drafter was trained at 8 whatever the top level says, so block_size=16 is a mismatch, and 8 is not.
    before = unit()
    with drafter_config({"block_size": 16, "dflash_config": {"block_size": 8, "target_layer_ids": [1, 15, 29, 43, 57],
                                                             "mask_token_id": 163838}}):
        rc, _, out = reconfigure(tmp_path, "--check", "-e", "block_size=8", name="block-8")
        assert rc == 0, " ".join(out.split())[-2500:]
        rc, _, out = reconfigure(tmp_path, "-e", "block_size=16", name="block-16")
    flat = " ".join(out.split())
    assert rc != 0, flat[-2500:]
    assert "config.json: block_size=16 differs from the drafter's trained block size 8" in flat, flat[-2500:]
    assert unit()["InvocationID"] == before["InvocationID"] and serving()


def test_the_rollback_restores_the_last_good_unit_on_its_own_port(tmp_path: Path):
    """The new config (another port) fails after the stop; the last good server comes back on ITS port."""
    rc, report, out = reconfigure(
        tmp_path, "-e", f"sglang_service_port={SPARE_PORT + 1}", "-e", "sim_fault=crash-on-load", name="rollback"
    )
    flat = " ".join(out.split())
    assert rc != 0 and report["status"] == "rolled_back", flat[-2500:]
    assert "rolled back: the last good unit is serving again" in flat
    # a failed start is reported at once, with the journal lines that explain it
    failure = report["failure"]
    assert failure["detection_s"] < 10 and failure["exit_to_detection_s"] < 5, failure
    assert any("crash-on-load" in line for line in failure["journal"]), failure["journal"]
    assert serving() and f"--port {PORT}" in sh("systemctl", "cat", UNIT).stdout


# ---- 4. stop and drain through the main process -----------------------------------------------------


def test_a_stop_drains_the_requests_in_flight(tmp_path: Path):
    """KillMode=mixed: SIGTERM reaches the main process only; its scheduler child keeps serving the drain."""
    result: dict[str, Any] = {}

    def stream() -> None:
        body = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 600, "stream": True,
                "temperature": 0}  # fmt: skip
        req = urllib.request.Request(BASE + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                result["events"] = [ln for ln in resp.read().decode().splitlines() if ln.startswith("data: ")]
        except Exception as exc:  # whatever ends the stream early is the failure to report
            result["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=stream)
    worker.start()
    time.sleep(1.5)  # the request is decoding now
    inv = unit()["InvocationID"]
    sh("systemctl", "stop", UNIT, timeout=300)
    worker.join(timeout=300)
    journal = sh("journalctl", f"_SYSTEMD_INVOCATION_ID={inv}", "--no-pager", "-o", "cat").stdout
    try:
        assert "error" not in result, f"{result['error']}\n{journal[-2000:]}"
        events = result["events"]
        assert events[-1] == "data: [DONE]"
        finals = [json.loads(e[6:]) for e in events[:-1]]
        assert any(c["choices"] and c["choices"][0].get("finish_reason") == "length" for c in finals)
        assert "Draining requests and shutting down" in journal
        assert "Scheduler hit an exception" not in journal
    finally:
        rc, _, out = reconfigure(tmp_path, name="after-drain")
        assert rc == 0, out[-3000:]


# ---- 8. a reconfigure runs only what a config change needs ------------------------------------------


def _task_outcome(out: str, task: str) -> str:
    """The first word after a task's banner in ansible's default output (ok, changed, skipping...)."""
    match = re.search(re.escape(f"TASK [{task}]") + r"[^\n]*\n(\w+)", out)
    assert match, f"task {task!r} not in the output"
    return match.group(1)


def test_a_reconfigure_skips_the_host_setup_while_its_stamp_matches(tmp_path: Path):
    stamp = f"/var/lib/sglang-deploy/{UNIT}.setup.sha256"
    setup_task = "ddtree.sglang.sglang_service : Create the dedicated system user"
    # --check: nothing restarts or changes; the stamp is read all the same (check_mode: false)
    rc, _, out = reconfigure(tmp_path, "--check", name="stamp-current")
    assert rc == 0, out[-3000:]
    # one skipped include: none of the setup's tasks is even listed
    include = "ddtree.sglang.sglang_service : Install the service user, directories, helpers and simulated fixtures"
    assert _task_outcome(out, include) == "skipping"
    assert f"TASK [{setup_task}]" not in out
    assert "TASK [sglang_service : Install the launcher and the device-node check]" not in out
    # forced back on
    rc, _, out = reconfigure(tmp_path, "--check", "-e", "sglang_service_setup=always", name="stamp-forced")
    assert rc == 0 and _task_outcome(out, setup_task) == "ok", out[-3000:]
    # a stamp from other setup inputs (another release of the role): the setup runs
    original = sh("cat", stamp).stdout
    try:
        sh("sh", "-c", f"echo 0000 > {stamp}")
        rc, _, out = reconfigure(tmp_path, "--check", name="stamp-stale")
        assert rc == 0 and _task_outcome(out, setup_task) == "ok", out[-3000:]
        stamp_task = ("ddtree.sglang.sglang_service : Stamp the host setup (a reconfigure with the same setup inputs "
                      "skips it)")
        assert _task_outcome(out, stamp_task) == "changed"
    finally:
        sh("sh", "-c", f"printf %s '{original.strip()}' > {stamp} && echo >> {stamp}")
