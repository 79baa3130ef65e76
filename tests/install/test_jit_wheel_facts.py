"""The facts the JIT compile check mirrors, read from the wheels the production lock pins.

roles/preflight/files/jit_compile_check.py compiles triton's driver.c and
FlashInfer's sampling.cu the way triton 3.8.0 and flashinfer-python 0.7.2 do
without importing them (torch is not on the test host). Each fact it relies on
is asserted here against the real wheels (scripts/build-wheelhouse.sh DIR --jit,
hash-checked from requirements/sglang-0.5.23-cu130.lock): when a lock update
changes one, this fails and the check must follow.
Runs in tests/install/run-host-checks.sh (REQUIRE_JIT_WHEELS=1); skipped
elsewhere when the wheels were not downloaded.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest
from install_helpers import ROOT

WHEELHOUSE = Path(os.environ.get("JIT_WHEELHOUSE", ROOT / ".whl-jit"))
CHECK = (ROOT / "roles" / "preflight" / "files" / "jit_compile_check.py").read_text()


def wheel_text(pattern: str, member: str) -> str:
    found = sorted(WHEELHOUSE.glob(pattern))
    if not found:
        if os.environ.get("REQUIRE_JIT_WHEELS") == "1":
            pytest.fail(f"{pattern} is not in {WHEELHOUSE} (scripts/build-wheelhouse.sh {WHEELHOUSE} --jit)")
        pytest.skip(f"{pattern} not downloaded (scripts/build-wheelhouse.sh .whl-jit --jit)")
    with zipfile.ZipFile(found[0]) as whl:
        return whl.read(member).decode()


def squeeze(text: str) -> str:
    return " ".join(text.split())


def test_triton_builds_driver_c_with_a_c_compiler_and_python_h() -> None:
    build = wheel_text("triton-3.8.0-*.whl", "triton/runtime/build.py")
    driver = wheel_text("triton-3.8.0-*.whl", "triton/backends/nvidia/driver.py")
    source = wheel_text("triton-3.8.0-*.whl", "triton/backends/nvidia/driver.c")
    assert "#include <Python.h>" in source and '#include "cuda.h"' in source
    # the compiler: $CC, else gcc, else clang
    assert 'cc = os.environ.get("CC")' in build and "cc = gcc if gcc is not None else clang" in build
    # the command the check replays
    assert 'cc_cmd = [cc, src, "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", so]' in build
    assert "include_dirs = include_dirs + [srcdir, py_include_dir, *custom_backend_dirs]" in build
    assert "if scheme == 'posix_local':" in build
    assert 'include_dirs = [os.path.join(dirname, "include")]' in driver
    assert "libraries = ['libcuda.so.1']" in driver
    assert 'subprocess.check_output(["/sbin/ldconfig", "-p"])' in driver
    assert '"-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", str(so), "-l:libcuda.so.1"' in CHECK


def test_flashinfer_sampling_needs_curand_and_links_against_the_stubs() -> None:
    cpp_ext = squeeze(wheel_text("flashinfer_python-0.7.2-*.whl", "flashinfer/jit/cpp_ext.py"))
    env = wheel_text("flashinfer_python-0.7.2-*.whl", "flashinfer/jit/env.py")
    sampling = wheel_text("flashinfer_python-0.7.2-*.whl", "flashinfer/jit/sampling.py")
    cuh = wheel_text("flashinfer_python-0.7.2-*.whl", "flashinfer/data/include/flashinfer/sampling.cuh")
    assert "#include <curand_kernel.h>" in cuh
    assert 'jit_env.FLASHINFER_CSRC_DIR / "sampling.cu"' in sampling
    assert squeeze('ldflags = [ "-shared", "-L$cuda_home/lib64", "-L$cuda_home/lib64/stubs", "-lcudart", "-lcuda", ]') \
        in cpp_ext
    assert 'cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")' in cpp_ext
    assert 'cxx = os.environ.get("CXX", "c++")' in cpp_ext
    assert '"$cuda_home/include",' in cpp_ext and 'sysconfig.get_path("include"),' in cpp_ext
    raw_cpp_ext = wheel_text("flashinfer_python-0.7.2-*.whl", "flashinfer/jit/cpp_ext.py")
    assert '"  command = $cxx $in $ldflags -o $out"' in raw_cpp_ext
    for cccl in ('"cccl" / "cub"', '"cccl" / "libcudacxx" / "include"', '"cccl" / "thrust"'):
        assert cccl in env
    assert 'FLASHINFER_CACHE_DIR: pathlib.Path = FLASHINFER_BASE_DIR / ".cache" / "flashinfer"' in env
    assert re.search(r'os\.getenv\("FLASHINFER_WORKSPACE_BASE", pathlib\.Path\.home\(\)\.as_posix\(\)\)', env)
    # the check's own link line and includes are these
    assert '"-shared", f"-L{home}/lib64", f"-L{home}/lib64/stubs", "-lcudart", "-lcuda"' in CHECK
    assert 'f"{home}/include"' in CHECK and 'sysconfig.get_path("include")' in CHECK


def test_tvm_ffi_headers_are_where_the_check_looks() -> None:
    found = sorted(WHEELHOUSE.glob("apache_tvm_ffi-0.1.11-*.whl"))
    if not found:
        wheel_text("apache_tvm_ffi-0.1.11-*.whl", "x")
    with zipfile.ZipFile(found[0]) as whl:
        names = set(whl.namelist())
    assert "tvm_ffi/include/dlpack/dlpack.h" in names
    assert any(n.startswith("tvm_ffi/include/tvm/ffi/") for n in names)
