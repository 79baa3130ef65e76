"""The host-side scripts of the toolchain, driver and model checks, without a host.

The same scripts run on the systemd test host in tests/install/run-host-checks.sh
(as the service user, in the unit's sandbox); here each one's logic is checked
directly: model files, checksum cache, the transient unit, the arch flags, the
apt pin comparison, the link-time libcuda stub.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from install_helpers import ROOT, load_path

FILES = ROOT / "roles" / "preflight" / "files"
MODEL_CHECK = FILES / "model_check.py"
CHECKSUMS = ROOT / "playbooks" / "files" / "model_checksums.py"
FIXTURE = ROOT / "tests" / "install" / "hostchecks" / "make_model_fixture.py"
STUB = ROOT / "roles" / "cuda_toolkit" / "files" / "libcuda_stub.py"
PINS = ROOT / "roles" / "cuda_toolkit" / "files" / "apt_pins_check.py"


@pytest.fixture
def models() -> Iterator[Path]:
    # Traversable by nobody (the unreadable-shard case runs as nobody), unlike pytest's 0700 tmp_path.
    root = Path(tempfile.mkdtemp(prefix="model-fixture-", dir="/tmp"))
    root.chmod(0o755)
    subprocess.run([sys.executable, str(FIXTURE), str(root / "m")], check=True)
    yield root / "m"
    shutil.rmtree(root)


def model_check(*dirs: Path, as_nobody: bool = False) -> tuple[int, dict[str, object]]:
    cmd = [sys.executable, str(MODEL_CHECK), *map(str, dirs)]
    if as_nobody:
        nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
        cmd = [*nobody, "/usr/bin/python3", "-", *map(str, dirs)]
        proc = subprocess.run(cmd, input=MODEL_CHECK.read_text(), capture_output=True, text=True, check=False)
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return proc.returncode, json.loads(proc.stdout)


def errors_of(report: dict[str, object], index: int) -> str:
    dirs = report["dirs"]
    assert isinstance(dirs, list)
    return "; ".join(dirs[index]["errors"])


def test_model_check_accepts_whole_models(models: Path) -> None:
    rc, report = model_check(models / "good", models / "drafter")
    assert rc == 0 and report["ok"] is True, report
    dirs = report["dirs"]
    assert isinstance(dirs, list)
    assert [d["shards"] for d in dirs] == [2, 1]


def test_model_check_names_missing_truncated_and_foreign_tensors(models: Path) -> None:
    broken = models / "broken"
    rc, report = model_check(broken)
    assert rc == 1 and report["ok"] is False
    errors = errors_of(report, 0)
    assert "model-00002-of-00004.safetensors: missing" in errors
    assert "model-00004-of-00004.safetensors:" in errors and "(truncated)" in errors
    # the index maps a tensor to a shard whose header does not hold it
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    index["weight_map"]["t0"] = "model-00001-of-00004.safetensors"
    index["weight_map"]["ghost"] = "model-00001-of-00004.safetensors"
    (broken / "model.safetensors.index.json").write_text(json.dumps(index))
    rc, report = model_check(broken)
    assert "1 tensor(s) of the index not in its header, e.g. ghost" in errors_of(report, 0)


def test_model_check_refuses_a_missing_config_and_an_empty_dir(models: Path) -> None:
    (models / "good" / "config.json").unlink()
    empty = models / "empty"
    empty.mkdir()
    rc, report = model_check(models / "good", empty)
    assert rc == 1
    assert "config.json:" in errors_of(report, 0)
    assert "no *.safetensors.index.json and no *.safetensors file" in errors_of(report, 1)


def test_model_check_total_size_must_cover_the_tensors(models: Path) -> None:
    good = models / "good"
    index = json.loads((good / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] += 4096
    (good / "model.safetensors.index.json").write_text(json.dumps(index))
    rc, report = model_check(good)
    assert rc == 1 and "the index's total_size is" in errors_of(report, 0)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_model_check_as_another_user_reports_an_unreadable_shard(models: Path) -> None:
    rc, report = model_check(models / "broken", as_nobody=True)
    assert rc == 1
    assert report["uid"] != 0
    assert "model-00003-of-00004.safetensors: not readable by uid" in errors_of(report, 0)
    # as root the same shard reads fine: the check is about the user it runs as
    _, as_root = model_check(models / "broken")
    assert "model-00003-of-00004.safetensors" not in errors_of(as_root, 0)


def test_model_checksums_are_cached_by_size_and_mtime(tmp_path: Path) -> None:
    model = tmp_path / "model"
    (model / ".cache").mkdir(parents=True)
    (model / "a.safetensors").write_bytes(b"a" * 1000)
    (model / "config.json").write_text("{}")
    (model / ".cache" / "skip").write_text("x")
    cache = tmp_path / "cache.json"

    def run() -> dict[str, object]:
        out = subprocess.run([sys.executable, str(CHECKSUMS), "--cache", str(cache), str(model)],
                             check=True, capture_output=True, text=True).stdout
        report: dict[str, object] = json.loads(out)["dirs"][str(model)]
        return report

    first = run()
    assert (first["hashed"], first["cached"]) == (2, 0)
    files = first["files"]
    assert isinstance(files, dict) and sorted(files) == ["a.safetensors", "config.json"]
    assert files["a.safetensors"]["sha256"] == hashlib.sha256(b"a" * 1000).hexdigest()
    second = run()
    assert (second["hashed"], second["cached"]) == (0, 2)
    # same size, new mtime: hashed again (a 548 GB model is read only when a file changed)
    st = (model / "a.safetensors").stat()
    (model / "a.safetensors").write_bytes(b"b" * 1000)
    os.utime(model / "a.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    third = run()
    assert (third["hashed"], third["cached"]) == (1, 1)
    assert third["files"]["a.safetensors"]["sha256"] == hashlib.sha256(b"b" * 1000).hexdigest()  # type: ignore[index]


UNIT = """\
# Ansible managed
[Unit]
Description=SGLang server
After=network-online.target
Requires=nvidia-persistenced.service

[Service]
Type=simple
User=sglang
Environment=CUDA_HOME=/opt/cuda-13.0/site-packages/nvidia/cu13
ExecStartPre=+/usr/bin/nvidia-modprobe -u -c0
ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server \\
    --model-path /models/Kimi-K2.6 \\
    --port 30001
Restart=on-failure
TimeoutStartSec=1200
ProtectHome=read-only

[Install]
WantedBy=multi-user.target
"""


def test_transient_unit_keeps_the_service_section_and_replaces_the_process(tmp_path: Path) -> None:
    usr = load_path("unit_sandbox_run", FILES / "unit_sandbox_run.py")
    unit = tmp_path / "sglang-k26-ddtree.service"
    unit.write_text(UNIT)
    text = usr.transient_unit(unit, "x-jit-check", ["/v/bin/python", "/c.py", "--arch", "$12.0 %n"], 900,
                              Path("/run/sglang-deploy/x.out"))
    service = text.split("[Service]\n", 1)[1]
    # everything of the unit's [Service] section, verbatim, continuation lines included
    assert "User=sglang\nEnvironment=CUDA_HOME=/opt/cuda-13.0/site-packages/nvidia/cu13\n" in service
    assert "    --port 30001\nRestart=on-failure" in service
    assert "ProtectHome=read-only" in service
    # nothing of [Unit] / [Install]: no dependency of the real unit is pulled in
    assert "Requires=" not in text and "WantedBy=" not in text and "After=" not in text
    # the replacements come after the copied section, so they win
    tail = service.split("# Replaced for the check:\n", 1)[1].splitlines()
    for line in ("ExecStartPre=", "Type=oneshot", "Restart=no", "ExecStart=", "TimeoutStartSec=900",
                 "StandardOutput=truncate:/run/sglang-deploy/x.out"):
        assert line in tail
    assert 'ExecStart=/v/bin/python /c.py --arch "$$12.0 %%n"' in tail
    with pytest.raises(ValueError, match="no \\[Service\\] section"):
        unit.write_text("[Unit]\nDescription=x\n")
        usr.transient_unit(unit, "x", ["true"], 1, Path("/x"))


class FakeSystemd:
    """systemctl as the launcher calls it: the unit's states in order (the last one stays), and the calls made."""

    def __init__(self, states: list[str], out: Path, result: str = "success", status: str = "0") -> None:
        self.states, self.out, self.calls = states, out, []  # type: list[str], Path, list[list[str]]
        self.result, self.status = result, status

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        text = ""
        if args[0] == "show" and "-pActiveState" in args:
            job, active = (self.states.pop(0) if len(self.states) > 1 else self.states[0]).split("/")
            text = f"Job={job}\nActiveState={active}\n"
        elif args[0] == "show":
            text = f"Result={self.result}\nExecMainStatus={self.status}\nInvocationID=abc\n"
        elif args[0] == "start":
            self.out.write_text(json.dumps({"ok": True, "cached": True}))
        return subprocess.CompletedProcess(list(args), 0, text, "")


def test_the_launcher_reports_a_quick_check_at_once_and_leaves_a_long_one_to_attach(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A check that ends within --sync-limit (a cached one) is reported by the start itself; one that does not
    is left running in systemd ({"pending": true}, the unit kept), and --attach waits for that same run without
    starting it again, reports it and removes the unit."""
    usr = load_path("unit_sandbox_run", FILES / "unit_sandbox_run.py")
    monkeypatch.setattr(usr, "RUN_DIR", tmp_path / "run")
    monkeypatch.setattr(usr, "OUT_DIR", tmp_path / "out")
    (tmp_path / "run").mkdir()
    unit = tmp_path / "sglang.service"
    unit.write_text(UNIT)
    start = ["--unit-file", str(unit), "--name", "sglang-jit-check", "--timeout", "900", "--sync-limit", "0.3",
             "--", "/v/bin/python", "/c.py"]
    transient = tmp_path / "run" / "sglang-jit-check.service"
    out = tmp_path / "out" / "sglang-jit-check.out"

    quick = FakeSystemd(["5/inactive", "/activating", "/inactive"], out)
    monkeypatch.setattr(usr, "systemctl", quick)
    assert usr.main(start) == 0
    report = json.loads(capsys.readouterr().out)
    assert "pending" not in report and report["rc"] == 0 and report["result"] == "success", report
    assert json.loads(report["stdout"]) == {"ok": True, "cached": True}
    assert ["start", "--no-block", "sglang-jit-check.service"] in quick.calls
    assert ["stop", "sglang-jit-check.service"] in quick.calls and not transient.exists() and not out.exists()

    long = FakeSystemd(["/activating"], out)
    monkeypatch.setattr(usr, "systemctl", long)
    assert usr.main(start) == 0
    assert json.loads(capsys.readouterr().out)["pending"] is True
    assert transient.exists() and not [c for c in long.calls if c[0] in ("stop", "reset-failed")], long.calls

    attach = FakeSystemd(["/activating", "/activating", "/failed"], out, result="exit-code", status="1")
    monkeypatch.setattr(usr, "systemctl", attach)
    monkeypatch.setattr(usr.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "nvcc: error\n", ""))
    assert usr.main(["--attach", "--name", "sglang-jit-check", "--timeout", "900"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["rc"] == 1 and report["result"] == "exit-code" and "nvcc: error" in report["journal"], report
    assert not [c for c in attach.calls if c[0] == "start"], attach.calls  # the same run, never started again
    assert not transient.exists()

    # nothing to attach to: said, not waited for
    assert usr.main(["--attach", "--name", "sglang-jit-check", "--timeout", "900"]) == 1
    assert "no run to attach to" in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize(
    ("cap", "flag"),
    [("12.0", "compute_120f,code=sm_120f"), ("10.3", "compute_103a,code=sm_103a"),
     ("10.0", "compute_100a,code=sm_100a"), ("9.0", "compute_90a,code=sm_90a"), ("12.1", "compute_121a,code=sm_121a"),
     ("8.9", "compute_89,code=sm_89"), ("12.0f", "compute_120f,code=sm_120f")],
)
def test_arch_flags_follow_flashinfers_normalisation(cap: str, flag: str, monkeypatch: pytest.MonkeyPatch) -> None:
    jcc = load_path("jit_compile_check", FILES / "jit_compile_check.py")
    monkeypatch.delenv("FLASHINFER_CUDA_ARCH_LIST", raising=False)
    assert jcc.arch_flags(cap) == [f"-gencode=arch={flag}"]
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "9.0 10.3")
    assert jcc.arch_flags(cap) == ["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_103a,code=sm_103a"]


@pytest.mark.parametrize(
    ("cap", "nvcc", "target"),
    [("12.0", "13.0", (12, 0, "f")), ("12.0", "12.8", (12, 0, "a")), ("12.1", "13.0", (12, 1, "a")),
     ("10.3", "13.0", (10, 3, "a")), ("9.0", "13.0", (9, 0, "a")), ("8.9", "13.0", (8, 9, "")),
     ("12.0f", "13.0", (12, 0, "f"))],
)  # fmt: skip
def test_sglang_jit_target_follows_sglangs_suffixes(cap: str, nvcc: str, target: tuple[int, int, str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """sglang's kernels/jit/utils/arch.py _cuda_arch_suffix: 9.x and >= 10 "a", 12.0 "f" from nvcc 12.9."""
    jcc = load_path("jit_compile_check", FILES / "jit_compile_check.py")
    monkeypatch.setattr(jcc, "version_banner", lambda cmd: f"Cuda compilation tools, release {nvcc}, V{nvcc}.88")
    assert jcc.sglang_target(cap, "/usr/local/cuda") == target
    with pytest.raises(ValueError, match=r"X\.Y is required"):
        jcc.sglang_target("sm90", "/usr/local/cuda")


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg")
def test_apt_pins_check_matches_globs_like_apt_preferences() -> None:
    bash = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "bash"], capture_output=True, text=True,
                          check=True).stdout

    def check(pins: dict[str, str], required: list[str]) -> dict[str, object]:
        out = subprocess.run([sys.executable, str(PINS), json.dumps(pins), json.dumps(required)],
                             check=True, capture_output=True, text=True).stdout
        result: dict[str, object] = json.loads(out)
        return result

    assert check({"bash": bash}, ["bash"])["ok"] is True
    assert check({"bas[h]": bash.split("-")[0] + "*"}, ["bash"])["ok"] is True
    wrong = check({"bash": "0.1-1"}, ["bash"])
    assert wrong["ok"] is False and wrong["wrong"] == [f"bash: installed {bash}, pinned 0.1-1"]
    absent = check({"bash": bash}, ["bash", "no-such-package-here"])
    assert absent["absent"] == ["no-such-package-here (required, not installed)",
                                "no-such-package-here (required, not pinned)"]


def cuda_h(tmp_path: Path) -> Path:
    wheels = sorted((ROOT / ".whl").glob("nvidia_cuda_runtime-13.0.96-*.whl"))
    if not wheels or shutil.which("gcc") is None:
        pytest.skip("needs the wheelhouse (make wheelhouse) and gcc")
    with zipfile.ZipFile(wheels[0]) as whl:
        for name in whl.namelist():
            if name.startswith("nvidia/cu13/include/") and name.endswith(".h"):
                whl.extract(name, tmp_path)
    return tmp_path / "nvidia" / "cu13"


def test_libcuda_stub_exports_the_driver_api_under_the_driver_soname(tmp_path: Path) -> None:
    home = cuda_h(tmp_path)
    stub = home / "lib" / "stubs" / "libcuda.so"
    out = subprocess.run([sys.executable, str(STUB), str(home), str(stub)], check=True, capture_output=True,
                         text=True).stdout
    assert json.loads(out)["symbols"] > 500
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(stub)], check=True, capture_output=True,
                             text=True).stdout
    for name in ("cuInit", "cuGetErrorString", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuMemAlloc_v2",
                 "cuTensorMapEncodeTiled"):
        assert f" T {name}\n" in symbols, name
    assert "Library soname: [libcuda.so.1]" in subprocess.run(["readelf", "-d", str(stub)], check=True,
                                                              capture_output=True, text=True).stdout
    # what the JITs do: a shared object calling the driver API, linked -lcuda with --as-needed (Ubuntu's
    # default) against the stub, records libcuda.so.1 (an empty stub would be dropped by --as-needed).
    src = tmp_path / "m.c"
    src.write_text(f'#include "{home}/include/cuda.h"\nint f(void) {{ return cuInit(0); }}\n')
    lib = tmp_path / "m.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,--as-needed", str(src), f"-L{stub.parent}", "-lcuda", "-o",
                    str(lib)], check=True)
    assert "Shared library: [libcuda.so.1]" in subprocess.run(["readelf", "-d", str(lib)], check=True,
                                                             capture_output=True, text=True).stdout
