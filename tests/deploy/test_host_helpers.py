"""The unit's helper programs, run as the unit runs them (no systemd needed).

- files/sglang-launch.py: the API keys reach the server's arguments but not
  the kernel's command line (``ps``), and never its output (unpatched sglang 0.5.23
  logs ``server_args={...}`` with the keys at startup; a child here does);
- files/sglang-device-check.py: what opening a device node says, on stand-in
  nodes with the real NVIDIA major (needs root for mknod; skipped otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, load_module

FILES = ROOT / "roles" / "sglang_service" / "files"
LAUNCH = FILES / "sglang-launch.py"
DEVCHECK = FILES / "sglang-device-check.py"
KEY = "k-launch-8f3a61c2d9e04b7f"
ADMIN = "k-admin-27c1e9b0a4d35f68"

launch = load_module("sglang_launch", LAUNCH)
devcheck = load_module("sglang_device_check", DEVCHECK)


def _keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"_managed": "Ansible managed", "api_key": KEY, "admin_api_key": ADMIN}))
    return path


def test_redacting_stream_replaces_every_key(tmp_path: Path):
    out = tmp_path / "out.txt"
    with out.open("w", encoding="utf-8") as fh:
        stream = launch.RedactingStream(fh, [KEY, ADMIN, ""])
        stream.write(f"server_args={{'api_key': '{KEY}', 'admin_api_key': '{ADMIN}'}}\n")
        stream.flush()
    assert out.read_text() == "server_args={'api_key': '<redacted>', 'admin_api_key': '<redacted>'}\n"


def test_the_module_gets_the_keys_ps_and_the_log_do_not(tmp_path: Path):
    mod = tmp_path / "fake_server.py"
    mod.write_text(
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, format='%(message)s', force=True)\n"  # as sglang does
        "logging.getLogger('x').info('server_args=%s', sys.argv[1:])\n"
        "print('cmdline=' + open('/proc/self/cmdline', 'rb').read().replace(b'\\0', b' ').decode())\n"
        "print('argv=' + repr(sys.argv[1:]))\n"
        "raise SystemExit(0)\n"
    )
    res = subprocess.run(
        [sys.executable, str(LAUNCH), "--keys-file", str(_keys(tmp_path)), "fake_server", "--port", "1"],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    everything = res.stdout + res.stderr
    assert KEY not in everything and ADMIN not in everything
    assert "server_args=['--port', '1', '--api-key', '<redacted>', '--admin-api-key', '<redacted>']" in everything
    assert f"--keys-file {tmp_path / 'keys.json'} fake_server --port 1" in res.stdout  # the kernel's command line


def test_a_key_on_the_command_line_is_refused():
    res = subprocess.run(
        [sys.executable, str(LAUNCH), "json.tool", "--api-key", "k"], capture_output=True, text=True, check=False
    )
    assert res.returncode != 0 and "--api-key on the command line is visible to every user" in res.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, key: str | None) -> int:
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_simulated_engine_through_the_launcher(tmp_path: Path):
    """The server enforces the keys, and neither its log nor its command line holds them."""
    from repro_py.simengine.fixtures import main as make_fixtures  # noqa: PLC0415

    assert make_fixtures([str(tmp_path / "fx")]) == 0
    port = _free_port()
    log = tmp_path / "engine.log"
    argv = [
        sys.executable, str(LAUNCH), "--keys-file", str(_keys(tmp_path)), "repro_py.simengine",
        "--model-path", str(tmp_path / "fx" / "target"), "--port", str(port),
        "--sim-load-seconds", "0.2", "--sim-warmup-seconds", "0.1",
    ]  # fmt: skip
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _get(base + "/health", None) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(log.read_text())
        assert _get(base + "/v1/models", None) == 401
        assert _get(base + "/v1/models", KEY) == 200
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
        assert KEY not in cmdline and ADMIN not in cmdline and "repro_py.simengine" in cmdline
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "server_args=" in text and "<redacted>" in text
    assert KEY not in text and ADMIN not in text


# ---- the device-node check -----------------------------------------------------------------------


@pytest.fixture
def nodes() -> Iterator[Path]:
    """Stand-in nodes with NVIDIA's major (195) and no driver behind them, in a
    directory every user may traverse (so only a node's own mode can refuse)."""
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        tmp_path = Path(tmp)
        tmp_path.chmod(0o755)
        yield from _make_nodes(tmp_path)


def _make_nodes(tmp_path: Path) -> Iterator[Path]:
    try:
        os.mknod(tmp_path / "nvidia0", 0o666 | 0o020000, os.makedev(195, 0))
    except PermissionError:
        pytest.skip("mknod is not permitted here")
    (tmp_path / "nvidia0").chmod(0o666)
    os.mknod(tmp_path / "nvidiactl", 0o600 | 0o020000, os.makedev(195, 255))
    (tmp_path / "plain").write_text("")
    yield tmp_path


def test_a_node_without_a_driver_passes_only_when_allowed(nodes: Path):
    try:
        fd = os.open(nodes / "nvidia0", os.O_RDWR)
    except OSError as exc:
        if exc.errno != errno.ENXIO:
            pytest.skip(f"opening a stand-in node gives {errno.errorcode[exc.errno]} here, not ENXIO")
    else:
        os.close(fd)
        pytest.skip("a driver answers major 195 on this machine")
    ok, line = devcheck.check(str(nodes / "nvidia0"), allow_no_driver=True)
    assert ok and "ENXIO: reachable, no driver behind it [char 195:0 mode 0666" in line
    ok, line = devcheck.check(str(nodes / "nvidia0"), allow_no_driver=False)
    assert not ok and "is the NVIDIA driver loaded?" in line


@pytest.mark.parametrize(
    ("name", "cause"),
    [("missing", "ENOENT: missing in the unit's sandbox"), ("plain", "not a char device")],
)
def test_missing_or_wrong_nodes_fail(nodes: Path, name: str, cause: str):
    ok, line = devcheck.check(str(nodes / name), allow_no_driver=True)
    assert not ok and cause in line


def test_a_node_the_user_may_not_open_fails_with_the_mode(nodes: Path):
    res = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, str(DEVCHECK),
         "--allow-no-driver", str(nodes / "nvidiactl")],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL" in res.stderr and "EACCES: permission denied by the node's mode/owner/group" in res.stderr
    assert "mode 0600 root:root" in res.stderr
    assert "0/1 GPU device nodes open for nobody" in res.stdout
