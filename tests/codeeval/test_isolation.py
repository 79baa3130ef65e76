"""Isolation is a requirement: the refusal without an isolating mode, the seccomp walls, the judge's namespace."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro_py.codeeval import isolation as iso
from repro_py.codeeval import sandbox, sandbox_child
from repro_py.codeeval.problems import ProblemsError, parse_problems
from repro_py.codeeval.sandbox import IsolationUnavailable, check_isolation, require_isolation, run_candidate

REPO = Path(__file__).resolve().parents[2]
HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
NAMES = {  # the syscalls each table entry stands for, by architecture (the headers' names)
    "x86_64": {
        "tasks": "clone fork vfork clone3",
        "others": "kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_send_signal pidfd_open pidfd_getfd "
                  "ptrace process_vm_readv process_vm_writev kcmp process_madvise socket socketpair io_uring_setup "
                  "io_uring_enter io_uring_register unshare setns mount umount2 pivot_root chroot open_tree move_mount "
                  "fsopen fsconfig fsmount fspick setrlimit prlimit64 setpriority bpf perf_event_open userfaultfd "
                  "keyctl add_key request_key memfd_create",
        "files": "creat openat2 mkdir mkdirat rmdir unlink unlinkat link linkat symlink symlinkat rename renameat "
                 "renameat2 truncate mknod mknodat",
        "open": "open openat",
    },
    "aarch64": {
        "tasks": "clone clone3",
        "others": "kill tkill tgkill rt_sigqueueinfo rt_tgsigqueueinfo pidfd_send_signal pidfd_open pidfd_getfd "
                  "ptrace process_vm_readv process_vm_writev kcmp process_madvise socket socketpair io_uring_setup "
                  "io_uring_enter io_uring_register unshare setns mount umount2 pivot_root chroot open_tree move_mount "
                  "fsopen fsconfig fsmount fspick setrlimit prlimit64 setpriority bpf perf_event_open userfaultfd "
                  "keyctl add_key request_key memfd_create",
        "files": "openat2 mkdirat unlinkat linkat symlinkat renameat renameat2 truncate mknodat",
        "open": "openat",
    },
}


@pytest.fixture
def fresh_check() -> Iterator[None]:
    """Each test probes the modes again (the check is cached per process)."""
    check_isolation.cache_clear()
    yield
    check_isolation.cache_clear()


# ---------------------------------------------------------------- the refusal


def test_without_bwrap_and_unshare_the_judge_refuses_and_says_what_to_install(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(iso, "find_tool", lambda name: None)
    with pytest.raises(IsolationUnavailable) as refused:
        require_isolation(allow_unisolated=False)
    text = str(refused.value)
    assert "refusing to judge candidate code: no isolating sandbox works on this machine" in text
    assert "bwrap: bubblewrap is not installed (no bwrap on PATH)" in text
    assert "apt-get install bubblewrap" in text
    assert "namespaces: unshare is not installed (no unshare on PATH)" in text and "install util-linux" in text
    assert "--allow-unisolated" in text
    assert require_isolation(allow_unisolated=True) == "none"


def test_tools_that_are_there_but_fail_get_the_user_namespace_hint(
    fresh_check: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bwrap and unshare present but refused (as when unprivileged user namespaces are off): the hint is the
    sysctl, not an install."""
    monkeypatch.setattr(iso, "find_tool", lambda name: "/bin/false")
    with pytest.raises(IsolationUnavailable) as refused:
        require_isolation(allow_unisolated=False)
    text = str(refused.value)
    assert text.count("unprivileged user namespaces") == 2 and "apt-get install" not in text


def test_an_isolating_mode_is_used_without_asking(fresh_check: None) -> None:
    mode = require_isolation(allow_unisolated=False)
    assert mode in ("bwrap", "namespaces"), check_isolation()


def _gates(path_env: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "repro_py.gates", "--url", "http://127.0.0.1:9", "--expect", "algorithm=none", *extra],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
        env={**os.environ, "PATH": path_env, "PYTHONPATH": str(REPO)},
    )


def test_the_gates_command_refuses_with_bwrap_and_unshare_really_absent(tmp_path: Path) -> None:
    """No seam: PATH holds neither bwrap nor unshare, as on a machine without them; nothing is requested."""
    proc = _gates(str(tmp_path))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "gates: refusing to judge candidate code" in proc.stderr
    assert "bubblewrap is not installed" in proc.stderr and "unshare is not installed" in proc.stderr
    assert "Cannot connect" not in proc.stderr + proc.stdout  # refused before the first request


# ---------------------------------------------------------------- the walls


def _header_numbers(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", path.read_text()):
        out.setdefault(m.group(1), int(m.group(2)))
    return out


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_table_has_the_kernels_numbers(machine: str) -> None:
    if not HEADERS[machine].is_file():
        pytest.skip(f"{HEADERS[machine]} is not installed (linux-libc-dev)")
    numbers = _header_numbers(HEADERS[machine])
    table = sandbox_child._SECCOMP[machine]
    for group, names in NAMES[machine].items():
        assert sorted(table[group]) == sorted(numbers[n] for n in names.split()), (machine, group)


def _run_bpf(prog: list[tuple[int, int, int, int]], nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter for the instructions the filter uses (ld abs, jeq, jge, jset, ret)."""
    data = {0: nr, 4: arch, **{16 + 8 * i: a for i, a in enumerate(args)}}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc, pc = data.get(k, 0) & 0xFFFFFFFF, pc + 1
        elif code in (0x15, 0x35, 0x45):
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc = pc + 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("files", [False, True])
def test_the_filter_refuses_exactly_the_table(machine: str, files: bool) -> None:
    allow, eperm, kill = 0x7FFF0000, 0x00050001, 0x80000000
    table = sandbox_child._SECCOMP[machine]
    arch = table["arch"]
    prog = sandbox_child.seccomp_program(machine, files=files)
    denied = set(table["tasks"]) | set(table["others"]) | (set(table["files"]) if files else set())
    for nr in range(460):
        if nr in table["open"]:
            continue
        assert _run_bpf(prog, nr, arch) == (eperm if nr in denied else allow), (machine, files, nr)
    for nr, arg in table["open"].items():
        args = [0] * 6
        assert _run_bpf(prog, nr, arch, tuple(args)) == allow  # O_RDONLY
        args[arg] = 0o101  # O_WRONLY | O_CREAT
        assert _run_bpf(prog, nr, arch, tuple(args)) == (eperm if files else allow)
    assert _run_bpf(prog, 0, 0x40000003) == kill  # another architecture's calling convention: killed
    if machine == "x86_64":
        assert _run_bpf(prog, 0x40000000 | 57, arch) == eperm  # the x32 ABI's numbers


def test_mode_none_uses_an_interpreter_its_fresh_uid_can_read() -> None:
    exe, prefix = iso.interpreter("none")
    if os.geteuid() != 0 or iso._open_to_others(iso._stdlib(os.path.realpath(sys.base_prefix))):
        assert exe == os.path.realpath(sys.executable)
    else:  # this interpreter's library is private (say, a pyenv under /root): a system one of the same version
        assert exe != os.path.realpath(sys.executable)
    assert iso._open_to_others(iso._stdlib(prefix))


# ---------------------------------------------------------------- the judge's namespace


def test_tests_see_only_the_entry_points_and_never_a_builtin_name() -> None:
    tests = compile("assert sorted(f(1)) == [1]\nassert helper(2)\n", "t", "exec")
    loaded = ["f", "helper", "sorted", "__import__", "unused"]
    assert sandbox.entry_points_for(tests, loaded, None) == ["f", "helper"]
    assert sandbox.entry_points_for(tests, loaded, ["f"]) == ["f"]
    with pytest.raises(ValueError, match=r"entry points .*'len'"):
        sandbox.check_entry_points(["len"])


def test_a_problem_whose_entry_point_is_a_builtin_is_refused() -> None:
    item = {"id": "p", "prompt": "x", "entry_point": "sorted", "reference": "x", "wrong_draft": "x", "tests": "x"}
    with pytest.raises(ProblemsError, match="entry_point 'sorted' must be an identifier that is not a builtin"):
        parse_problems([item])


def test_a_helper_the_tests_do_not_call_is_not_theirs_to_see() -> None:
    code = "def f(x):\n    return x\ndef expected():\n    return 3\n"
    res = run_candidate(code, "assert f(3) == expected()\n", entry_points=("f",))
    assert res.outcome == "exception" and "NameError" in res.detail, res


def test_a_stand_in_bwrap_never_names_the_real_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bwrap taken away for one check does not leave its version behind for the next (CI saw the recorded
    isolation read 'false (GNU coreutils) 9.1' after a test had put /bin/false in bwrap's place)."""
    with monkeypatch.context() as stand_in:
        stand_in.setattr(iso, "find_tool", lambda name: "/bin/false")
        assert iso.describe("bwrap", 1).startswith("bubblewrap (/bin/false, version not reported)")
    if iso.find_tool("bwrap") is not None:
        assert iso.describe("bwrap", 1).startswith("bubblewrap "), iso.describe("bwrap", 1)
        assert "coreutils" not in iso.describe("bwrap", 1)
