"""Runs tests/patches/cpu/check_*.py inside the CPU sglang venv.

The project venv has no torch; the CPU venv (patches/tools/make-cpu-venv.sh)
has torch 2.13.0 CPU and sglang==0.5.23 installed --no-deps. The checks
import sglang from a copy of the pristine wheel with the series applied
(DDTREE_PATCHED_TREE, first on sys.path), never from the venv's own copy.
Without the venv these tests skip, or FAIL when REPRO_REQUIRE_SGLANG_CPU=1.

All the check files run in one pytest process of the CPU venv (torch, triton's
interpreter and the patched sglang imported once, not once per file: about a
third of the CPU time ten processes took), and each file is judged on its own
from that run's JUnit report: a file none of whose tests passed, or with a
failed one, fails its own test here, named, with the failures' text.
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CPU_DIR = REPO_ROOT / "tests" / "patches" / "cpu"

CHECKS = [
    "check_server_args.py",
    "check_ddtree_utils.py",
    "check_ddtree_device_build.py",
    "check_ddtree_sampling.py",
    "check_triton_kernels.py",
    "check_kv_reservation.py",
    "check_scheduler_path.py",
    "check_refusals.py",
    "check_static_buffers.py",
    "check_server_info_redaction.py",
]


@dataclass
class SuiteRun:
    """One pytest run of every check file in the CPU venv: its exit status, output and each file's test cases."""

    returncode: int
    output: str
    #: check file -> [(test name, outcome: passed | failed | error | skipped, failure text)]
    cases: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)

    def __repr__(self) -> str:  # a failure's traceback shows the fixture: its counts, not the whole output
        return f"SuiteRun(rc={self.returncode}, {sum(map(len, self.cases.values()))} cases in {len(self.cases)} files)"


def read_junit(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    cases: dict[str, list[tuple[str, str, str]]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = next((part for part in case.get("classname", "").split(".") if part.startswith("check_")), "")
        outcome, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome, text = ("failed" if tag == "failure" else tag), (found.text or found.get("message", ""))
                break
        cases.setdefault(f"{module}.py", []).append((case.get("name", "?"), outcome, text))
    return cases


@pytest.fixture(scope="module")
def suite_run(cpu_python, patched_tree, tmp_path_factory) -> SuiteRun:
    out = tmp_path_factory.mktemp("cpu-suite")
    env = dict(os.environ)
    env.update(
        DDTREE_PATCHED_TREE=str(patched_tree),
        DDTREE_TEST_DEVICE="cpu",
        TRITON_INTERPRET="1",
        PYTHONDONTWRITEBYTECODE="1",
        DDTREE_KERNEL_REPORT=str(out / "kernels.jsonl"),
        # one torch thread: the checks' tensors are tiny, and the suite runs beside another test worker and the test
        # hosts, where a second OpenMP thread only contends (idle machine: 102 CPU s with two threads, 82 with one)
        OMP_NUM_THREADS="1",
    )
    env.pop("PYTHONPATH", None)
    junit = out / "junit.xml"
    cmd = [
        str(cpu_python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "-W", "ignore::pytest.PytestConfigWarning", "-o", "python_files=check_*.py",
        f"--rootdir={REPO_ROOT}", f"--junitxml={junit}", *(str(CPU_DIR / check) for check in CHECKS),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, read_junit(junit) if junit.exists() else {})


def test_every_check_file_is_run() -> None:
    assert sorted(CHECKS) == sorted(p.name for p in CPU_DIR.glob("check_*.py"))


@pytest.mark.sglang_cpu
@pytest.mark.parametrize("check", CHECKS)
def test_cpu_suite(check: str, suite_run: SuiteRun) -> None:
    cases = suite_run.cases.get(check, [])
    assert cases, f"{check}: no test of it ran in the CPU venv (rc={suite_run.returncode}):\n{suite_run.output[-6000:]}"
    bad = [f"{name}: {outcome}\n{text[-3000:]}" for name, outcome, text in cases if outcome in ("failed", "error")]
    assert not bad, f"{check} failed in the CPU venv:\n" + "\n".join(bad)
    assert any(outcome == "passed" for _, outcome, _ in cases), f"{check}: every test skipped: {cases}"
