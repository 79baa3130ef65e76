"""REPRODUCE.md, executed: every command block, in order, as written, on a bare Ubuntu 24.04 controller and host.

The blocks are extracted from the document (```sh host / ```sh controller) and split into commands; each
command runs in its machine's one shell session (the directory, exported environment and umask one command
leaves are the next one's), on the host as ``deploy`` and on the controller as ``engineer``, both with
password-less sudo. The only changes are the document's own table of substitutions (its last section), each
of which must be used: local mirrors for the NVIDIA repository, the Python index and the Hugging Face Hub;
the GPU stand-ins; the simulated engine through the inventory edits; SIGINT for Ctrl-C. A block this test does
not run, or a substitution it uses that the document does not list, fails it.

The host is the rehearsal's test host (tests/rehearsal/conftest.py); the shipped-inventory rehearsals
(test_rehearsal.py) run on it afterwards. Runs with SGLANG_REHEARSAL=1 (make rehearsal).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from repro_py.simengine.fixtures import write_model_dirs
from tests.rehearsal.mirrors import Served, files, serve_dir, simple_index
from tests.rehearsal.rehearsal_host import ADDRESS, ENV, NAME, NETWORK, ROOT, in_host, podman

pytestmark = pytest.mark.testhost

DOC = ROOT / "REPRODUCE.md"
CONTROLLER = "operator-controller"
CONTROLLER_IP = "10.89.117.20"
GATEWAY = "10.89.117.1"
HF_SHA = "5f1c2d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
NVIDIA_URL = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
SANDBOX = ("--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined")
BLOCK = re.compile(r"^```sh (host|controller)\n(.*?)^```$", re.M | re.S)
TIMES: dict[str, float] = {}


def blocks(text: str) -> list[tuple[str, str]]:
    """(machine, block) for every command block, in order; a ```sh block without a machine is an error."""
    untagged = re.findall(r"^```(?:sh|bash|shell)\s*$", text, re.M)
    assert not untagged, "REPRODUCE.md has a command block that says neither host nor controller"
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def commands(block: str) -> list[str]:
    """A block's commands: comment lines dropped, backslash continuations, heredocs and { ... } groups kept whole."""
    out: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cmd = line
        while cmd.endswith("\\") and i < len(lines):
            cmd += "\n" + lines[i]
            i += 1
        heredoc = re.search(r"<<'?(\w+)'?", cmd)
        if heredoc or cmd.strip() == "{" or cmd.startswith("{ "):
            end = heredoc.group(1) if heredoc else "}"
            while i < len(lines) and not lines[i].startswith(end):
                cmd += "\n" + lines[i]
                i += 1
            cmd += "\n" + lines[i]
            i += 1
        out.append(cmd)
    return out


class Session:
    """One user's shell session in a container: each command resumes the directory, environment and umask."""

    def __init__(self, container: str, user: str, env: dict[str, str], log: Path) -> None:
        self.container, self.user, self.log = container, user, log
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        self.raw(f"cd ~ && pwd > ~/.session-cwd && umask 022 && umask > ~/.session-umask && "
                 f"printf %s {shlex.quote(exports)} > ~/.session-env")  # fmt: skip

    def raw(self, script: str, stdin: str | None = None, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", "exec", "-i", "-u", self.user, "-w", "/", self.container, "bash", "-lc", script],
            input=stdin, capture_output=True, text=True, timeout=timeout, env=ENV, check=False,
        )  # fmt: skip

    def wrapped(self, command: str) -> str:
        return (
            'cd "$(cat ~/.session-cwd)" && umask "$(cat ~/.session-umask)" && . ~/.session-env && set -eo pipefail\n'
            f"{command}\n"
            "pwd > ~/.session-cwd; umask > ~/.session-umask; export -p > ~/.session-env\n"
        )

    def run(self, command: str, *, stdin: str | None = None, expect: int = 0) -> str:
        started = time.monotonic()
        proc = self.raw(self.wrapped(command), stdin=stdin)
        out = proc.stdout + proc.stderr
        with self.log.open("a") as fh:
            fh.write(f"\n$ {command}\n(rc={proc.returncode}, {time.monotonic() - started:.1f} s)\n{out}")
        assert proc.returncode == expect, f"[{self.container}] {command}\nrc={proc.returncode}:\n{out[-5000:]}"
        return out

    def popen(self, command: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            ["podman", "exec", "-i", "-u", self.user, "-w", "/", self.container, "bash", "-lc", self.wrapped(command)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV,
        )  # fmt: skip


def edits(clone: str) -> dict[str, str]:
    """``$EDITOR FILE`` -> the file the rehearsal writes (the document's substitution table says what changes)."""
    ct200 = ROOT / "inventory" / "ct200"
    hosts = {"all": {"children": {"sglang_servers": {"hosts": {"ct200": {"ansible_user": "deploy"}}}}}}
    service = yaml.safe_load((ct200 / "group_vars" / "all" / "service.yml").read_text())
    service.update({
        "sglang_service_engine": "simulated", "sglang_service_sim_speed": 50.0, "preflight_torch_check": "auto",
        "sglang_service_sim_load_seconds": 0.5, "sglang_service_sim_warmup_seconds": 0.5,
        "sglang_service_device_check": "allow_no_driver", "cuda_toolkit_wheel_python": "python3",
        "python_env_python": "python3",
        "python_env_requirements": "{{ inventory_dir }}/../../requirements/testhost.lock",
        "python_env_local_wheels": [{"file": "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"},
                                    {"file": "repro_py-0.1.0-py3-none-any.whl"}],
    })  # fmt: skip
    sweep = yaml.safe_load((ct200 / "group_vars" / "all" / "sweep.yml").read_text())
    sweep["sweep_grid"] = [
        {"algorithm": "none"},
        {"algorithm": "ddtree", "budget": 8, "topk": 4, "window": 2048, "block_size": 8},
    ]  # Ctrl-C after the first, --resume runs the second; a failing config: test_rehearsal.py's sweeps
    sweep["sweep_bench"] = {"contexts": [60], "concurrency": [1], "repeats": 1, "max_tokens": 32}
    base = f"{clone}/inventory/mysite"
    return {
        f"{base}/hosts.yml": "---\n" + yaml.safe_dump(hosts, sort_keys=False),
        f"{base}/group_vars/all/service.yml": "---\n" + yaml.safe_dump(service, sort_keys=False),
        f"{base}/group_vars/all/nvidia.yml": (ct200 / "group_vars" / "all" / "nvidia.yml").read_text(),
        f"{base}/group_vars/all/sweep.yml": "---\n" + yaml.safe_dump(sweep, sort_keys=False),
    }


@pytest.fixture(scope="module")
def mirrors(testhost: str, results_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The three local mirrors, on the bridge's gateway address; their base URLs. Their files lie in pytest's
    temporary directory (the last three runs' are kept), not in one of /tmp's own that every run would leave."""
    logs = results_root / "mirrors"
    logs.mkdir(exist_ok=True)
    index_dir = simple_index(files(ROOT / ".whl"))
    repo = tmp_path_factory.mktemp("reproduce-apt")
    started = []
    try:
        pypi = serve_dir(index_dir.parent, GATEWAY, logs / "pypi.log")
        started.append(pypi)
        url = f"http://{GATEWAY}:{{port}}/"
        apt_probe = serve_dir(repo, GATEWAY, logs / "apt.log")
        started.append(apt_probe)
        subprocess.run([str(ROOT / "tests" / "install" / "aptrepo" / "build-repo.sh"), str(repo),
                        url.format(port=apt_probe.port)], check=True, capture_output=True)  # fmt: skip
        hub = repo.parent / f"{repo.name}-hub"
        models = write_model_dirs(hub / "sim")
        (hub / "moonshotai").mkdir(parents=True)
        (hub / "SubSir").mkdir()
        Path(models["model_path"]).rename(hub / "moonshotai" / "Kimi-K2.6")
        Path(models["draft_model_path"]).rename(hub / "SubSir" / "Kimi-K2.6-DFlash-tmp-long")
        hf = Served([str(Path(ROOT / ".venv" / "bin" / "python")), str(ROOT / "tests" / "rehearsal" / "hf_mirror.py"),
                     str(hub), "--sha", HF_SHA, "--bind", GATEWAY], logs / "hub.log")  # fmt: skip
        started.append(hf)
        yield {"pypi": url.format(port=pypi.port) + "simple/", "apt": url.format(port=apt_probe.port),
               "hub": f"http://{GATEWAY}:{hf.port}"}  # fmt: skip
    finally:
        for server in started:
            server.stop()


@pytest.fixture(scope="module")
def controller(testhost: str, results_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bare Ubuntu 24.04 controller: user engineer with password-less sudo, its key authorized on the host."""
    subprocess.run(["podman", "rm", "-f", CONTROLLER], env=ENV, check=False, capture_output=True)
    clone = tmp_path_factory.mktemp("reproduce-clone") / "sglang-ddtree.git"  # the repository the controller clones
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(clone)], check=True)
    # SANDBOX: as a machine has none of podman's seccomp filter and /proc masks (the coding eval's bubblewrap
    # sets its sandbox's hostname and mounts its /proc in a user namespace: both refused under them)
    podman("run", "-d", "--name", CONTROLLER, "--hostname", "controller", "--systemd=always", *SANDBOX,
           "--network", NETWORK, "--ip", CONTROLLER_IP, "--add-host", f"ct200:{ADDRESS}",
           "--add-host", "controller:127.0.1.1",
           "-v", f"{clone}:/srv/sglang-ddtree.git:ro", "localhost/sglang-testhost:ubuntu-24.04", "/sbin/init")
    ssh = Path.home() / ".ssh" / "sglang-testhost"
    hostkey = " ".join(in_host("cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[:2])
    setup = (
        "useradd --create-home --shell /bin/bash engineer && "
        "echo 'engineer ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/engineer && chmod 0440 /etc/sudoers.d/engineer && "
        "install -d -m 0700 -o engineer -g engineer /home/engineer/.ssh"
    )
    podman("exec", CONTROLLER, "sh", "-c", setup)
    for name, body in (("id_ed25519", (ssh / "id_ed25519").read_text()),
                       ("id_ed25519.pub", (ssh / "id_ed25519.pub").read_text()),
                       ("known_hosts", f"ct200 {hostkey}\n")):  # fmt: skip
        podman("exec", "-i", CONTROLLER, "sh", "-c",
               f"cat > /home/engineer/.ssh/{name} && chown engineer: /home/engineer/.ssh/{name} && "
               f"chmod 0600 /home/engineer/.ssh/{name}", stdin=body)  # fmt: skip
    try:
        yield CONTROLLER
    finally:
        if os.environ.get("KEEP") != "1":
            subprocess.run(["podman", "rm", "-f", CONTROLLER], env=ENV, check=False, capture_output=True)


def reboot_host() -> None:
    """The host rebooted (`sudo reboot` stops the container's systemd); started again, sshd answering."""
    for _ in range(120):
        if podman("inspect", "-f", "{{.State.Running}}", NAME).strip() != "true":
            break
        time.sleep(0.5)
    podman("start", NAME)
    for _ in range(240):
        state = podman("exec", NAME, "systemctl", "is-system-running", check=False).strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise AssertionError(f"{NAME} did not come back after the reboot (systemd: {state})")


def test_reproduce_md_as_written(testhost: str, mirrors: dict[str, str], controller: str, results_root: Path) -> None:
    doc = DOC.read_text()
    table = doc.split("## What the rehearsal substitutes", 1)[1]
    found = blocks(doc)
    assert [m for m, _ in found][:4] == ["host"] * 4 and found[-1][0] == "controller", [m for m, _ in found]
    clone = "/home/engineer/sglang-ddtree"
    pip_env = {"PIP_INDEX_URL": mirrors["pypi"], "PIP_TRUSTED_HOST": GATEWAY}
    logs = results_root / "reproduce"
    logs.mkdir(exist_ok=True)
    sessions = {
        "host": Session(NAME, "deploy", {**pip_env, "HF_ENDPOINT": mirrors["hub"], "USER": "deploy"},
                        logs / "host.log"),
        "controller": Session(CONTROLLER, "engineer", {**pip_env, "USER": "engineer"}, logs / "controller.log"),
    }
    edited = edits(clone)
    used: set[str] = set()
    ran = 0
    for machine, block in found:
        for written in commands(block):
            session, t = sessions[machine], time.monotonic()
            command, stdin, expect = substitute(written, mirrors, edited, used)
            if command == "sudo reboot":
                session.raw(command)
                reboot_host()
                # GPU stand-ins: nvidia-smi answers for 8 GPUs at the installed driver's version
                in_host("python3", "-c", "import json; p='/etc/fake-nvidia/state.json'; s=json.load(open(p)); "
                        "s['driver_version']='580.126.20'; json.dump(s, open(p, 'w'))")  # fmt: skip
                used.add("reboot")
            elif command.startswith("python -m repro_py.sweep inventory/mysite") and command.endswith("Ctrl-C is safe"):
                interrupted(session, command, clone)
                used.add("ctrl-c")
            else:
                session.run(command, stdin=stdin, expect=expect)
            if re.match(r"python -m repro_py\.(gates|sweep) (?!.*--dry-run)", command):
                used.add("sandbox")  # the coding eval ran in bubblewrap on the controller
            TIMES[command.splitlines()[0][:60]] = round(time.monotonic() - t, 1)
            ran += 1
    assert ran == sum(len(commands(b)) for _, b in found)
    for name, marker in (("nvidia", NVIDIA_URL), ("pypi", "PIP_INDEX_URL"), ("hub", "HF_ENDPOINT"),
                         ("editor", "$EDITOR FILE"), ("production", "--production"), ("reboot", "sudo reboot"),
                         ("ctrl-c", "Ctrl-C"), ("repository", "<this repository>"),
                         ("sandbox", " ".join(SANDBOX))):  # fmt: skip
        assert name in used, f"the substitution {name} was not used"
        assert marker in table, f"REPRODUCE.md does not list the substitution {marker}"
    check_outcome(sessions["controller"], clone)
    (results_root / "reproduce-times.json").write_text(json.dumps(TIMES, indent=2) + "\n")
    print(f"reproduce: {ran} commands in {len(found)} blocks, {sum(TIMES.values()):.0f} s")


def substitute(
    command: str, mirrors: dict[str, str], edited: dict[str, str], used: set[str]
) -> tuple[str, str | None, int]:
    """The document's substitutions (its table), applied to one command: (command, stdin, expected exit status)."""
    if NVIDIA_URL in command:
        command = command.replace(NVIDIA_URL, mirrors["apt"])
        used.add("nvidia")
    if "pipx install" in command or command.startswith("make venv") or "build-wheelhouse.sh" in command:
        used.add("pypi")
    if command.startswith("hf download"):
        command = command.replace("<target repository>", "moonshotai/Kimi-K2.6").replace("<commit sha>", HF_SHA)
        used.add("hub")
    if "<this repository>" in command:
        command = command.replace("<this repository>", "/srv/sglang-ddtree.git")
        used.add("repository")
    if "--production" in command:
        command = command.replace(" --production", "")
        used.add("production")
    editor = re.match(r"\$EDITOR (\S+)", command)
    if editor:
        used.add("editor")
        path = editor.group(1)
        target = next(p for p in edited if p.endswith(path))
        return f"cat > {shlex.quote(path)}", edited[target], 0
    return command, None, 0


def interrupted(session: Session, command: str, clone: str) -> None:
    """The sweep, then Ctrl-C (SIGINT) once its first config's result is written: it must stop resumable (130)."""
    before = set(session.raw(f"ls -d {clone}/results/*/ 2>/dev/null").stdout.split())  # step 5's sweep
    proc = session.popen(command)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        listed = session.raw(f"ls -d {clone}/results/*/configs/*.json 2>/dev/null").stdout.split()
        if any(path.split("configs/")[0] not in before for path in listed):
            break
        assert proc.poll() is None, f"the sweep ended before its first result:\n{proc.communicate()[0]}"
        time.sleep(1)
    session.raw("pkill -INT -u engineer -f 'python -m repro_py.sweep inventory/mysite$'")
    out, _ = proc.communicate(timeout=600)
    with session.log.open("a") as fh:
        fh.write(f"\n$ {command}   (interrupted)\n(rc={proc.returncode})\n{out}")
    assert proc.returncode == 130, out[-3000:]
    assert "--resume" in out


def check_outcome(session: Session, clone: str) -> None:
    """What the document says the commands leave behind."""
    env_dir = f"{clone}/results/env/ct200"
    checksums = json.loads(session.raw(f"cat {env_dir}/model-checksums.json").stdout)
    revisions = {d["revision"] for d in checksums["dirs"].values()}
    assert revisions == {HF_SHA}, revisions  # collect.yml read the pinned revision the download left
    assert set(checksums["dirs"]) == {"/models/Kimi-K2.6", "/models/Kimi-K2.6-DFlash"}, sorted(checksums["dirs"])
    # its models.sha256 (absolute paths) accepted by `sha256sum -c` on the host the weights are on
    sums = session.raw(f"cat {env_dir}/models.sha256").stdout
    assert sums.strip() and in_host("sh", "-c", "cd / && sha256sum -c -", stdin=sums)
    runs = session.raw(f"ls -d {clone}/results/*/configs | sort").stdout.split()
    assert len(runs) == 2, runs  # step 5's lossless sweep, then step 7's (Ctrl-C, --resume)
    status = "import json, sys; print([json.load(open(p))[\"status\"] for p in sys.argv[1:]])"
    for configs in runs:
        run = configs.removesuffix("/configs")
        state = json.loads(session.raw(f"cat {run}/state.json").stdout)
        assert state["status"] == "complete" and state["restore"]["status"] == "ok", state
        statuses = session.raw(f"python3 -c '{status}' {configs}/*.json").stdout.strip()
        assert statuses == "['ok', 'ok']", statuses  # both configs (step 7: one before Ctrl-C, one after --resume)
        assert session.raw(f"cd {run} && sha256sum -c --quiet MANIFEST.sha256").returncode == 0
    keys = session.raw("cat ~/.sglang-api-key ~/.sglang-admin-key").stdout
    assert len(keys) == 96
    leaked = session.raw(f"grep -rlF -e {keys[:48]} -e {keys[48:]} {clone}/results; true")
    assert leaked.stdout.strip() == "", leaked.stdout
