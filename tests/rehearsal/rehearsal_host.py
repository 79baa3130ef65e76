"""The rehearsal's test host and helpers: a podman systemd container with a network namespace of its own.

The container (testhost/up.sh with TESTHOST_NETWORK) sits on the podman network
``operator-rehearsal`` (10.89.117.0/24, a bridge on this machine, published nowhere):
the service's 0.0.0.0 bind is an address of the test host's own namespace, reached
from this machine at 10.89.117.10 and from nowhere else. Its apt traffic leaves
through the bridge's NAT to Ubuntu's archive, as the other test hosts' does.
The container and the network are removed at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAME = "operator-testhost"
NETWORK = "operator-rehearsal"
SUBNET = "10.89.117.0/24"
ADDRESS = "10.89.117.10"
PASSWORD_FILE = ROOT / "tests" / "rehearsal" / "vault-password"
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT),
    "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
    "CONTAINERS_CONF": str(ROOT / "testhost" / "containers.conf"),
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks",
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
}
ENV.pop("SGLANG_API_KEY", None)
ENV.pop("SGLANG_ADMIN_API_KEY", None)


def wanted() -> bool:
    return os.environ.get("SGLANG_REHEARSAL") == "1"


def podman(*args: str, timeout: float = 300, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout,
                          check=False, input=stdin)  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed: {proc.stdout}{proc.stderr}")
    return proc.stdout


def in_host(*args: str, check: bool = True, stdin: str | None = None) -> str:
    return podman("exec", "-i", NAME, *args, check=check, stdin=stdin)


def run(args: list[str], log: Path, *, timeout: float = 900, expect_rc: int | None = 0) -> str:
    """Run a command of the rehearsal from the repository root, its output kept in ``log``."""
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)  # fmt: skip
    out = proc.stdout + proc.stderr
    log.write_text(f"$ {' '.join(args)}\n(rc={proc.returncode}, {time.monotonic() - started:.1f} s)\n{out}")
    if expect_rc is not None:
        assert proc.returncode == expect_rc, f"{' '.join(args[:6])} ... rc={proc.returncode}:\n{out[-6000:]}"
    return out


def vault_keys(inventory: str) -> tuple[str, str]:
    """The rehearsal's inference and admin keys, read from its vault file as an operator would."""
    out = subprocess.run(
        [str(BIN / "ansible-vault"), "view", "--vault-password-file", str(PASSWORD_FILE),
         str(ROOT / "tests" / "rehearsal" / inventory / "group_vars" / "all" / "vault.yml")],
        capture_output=True, text=True, check=True, env=ENV,
    ).stdout  # fmt: skip
    values = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line and not line.startswith("#"))
    return values["vault_sglang_service_api_key"].strip(), values["sglang_service_admin_api_key"].strip()


class ProcessWatch:
    """Samples every process's command line on this controller (what ``ps`` shows any user) while it runs."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                try:
                    self.seen.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
                except OSError:
                    continue
            self._stop.wait(0.5)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def files_with(root: Path, secrets: list[str]) -> list[str]:
    """Every file under ``root`` holding one of ``secrets`` (as text)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path} holds {s[:12]}..." for s in secrets if s.encode() in data]
    return found


def network() -> None:
    """The podman network, without its DNS daemon (aardvark-dns would outlive the test, holding whatever file
    descriptors the test had open: a lock among them)."""
    exists = subprocess.run(["podman", "network", "exists", NETWORK], env=ENV, check=False).returncode == 0
    if exists and podman("network", "inspect", NETWORK, "--format", "{{.DNSEnabled}}").strip() != "false":
        podman("network", "rm", "-f", NETWORK)
        exists = False
    if not exists:
        podman("network", "create", "--disable-dns", "--subnet", SUBNET, NETWORK)


def gpu_profile(profile: str, fabric: bool) -> None:
    """Turn the test host's GPU stand-ins into ``profile``'s, at the driver version they report now (the one
    REPRODUCE.md's step 0 installed, if it ran), and add the NVSwitch fabric stand-ins."""
    state = json.loads(in_host("cat", "/etc/fake-nvidia/state.json"))
    doc = json.loads(subprocess.run(
        [sys.executable, str(ROOT / "testhost" / "fake-gpu" / "state.py"), "--uvm-major", str(state["uvm_major"]),
         "--profile", profile], capture_output=True, text=True, check=True,
    ).stdout)  # fmt: skip
    doc["driver_version"] = state["driver_version"]
    in_host("sh", "-c", "cat > /etc/fake-nvidia/state.json", stdin=json.dumps(doc, indent=2) + "\n")
    if fabric:
        in_host("sh", stdin=(ROOT / "testhost" / "fake-gpu" / "fabric.sh").read_text())
