"""The facts the JIT compile check mirrors, read from the wheels the production lock pins.

roles/preflight/files/jit_compile_check.py compiles triton's driver.c and
FlashInfer's sampling.cu the way triton 3.8.0 and flashinfer-python 0.7.2 do,
and sglang 0.5.23's sgl_kernel/speculative/sampling.cuh the way its load_jit
does, without importing them (torch is not on the test host). Each fact it
relies on is asserted here against the real wheels (scripts/build-wheelhouse.sh
DIR --jit, hash-checked from requirements/sglang-0.5.23-cu130.lock; the sglang
cp312 wheel of the wheelhouse, $WHEELHOUSE or .whl): when a lock update changes
one, this fails and the check must follow.
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
SGLANG_WHEELHOUSE = Path(os.environ.get("WHEELHOUSE", ROOT / ".whl"))
SGLANG_WHEEL = "sglang-0.5.23-cp312-cp312-*.whl"
CHECK = (ROOT / "roles" / "preflight" / "files" / "jit_compile_check.py").read_text()


def wheel_text(pattern: str, member: str, wheelhouse: Path = WHEELHOUSE) -> str:
    found = sorted(wheelhouse.glob(pattern))
    if not found:
        if os.environ.get("REQUIRE_JIT_WHEELS") == "1":
            pytest.fail(f"{pattern} is not in {wheelhouse} (scripts/build-wheelhouse.sh {wheelhouse} [--jit])")
        pytest.skip(f"{pattern} not downloaded (scripts/build-wheelhouse.sh {wheelhouse} [--jit])")
    with zipfile.ZipFile(found[0]) as whl:
        return whl.read(member).decode()


def sglang_text(member: str) -> str:
    return wheel_text(SGLANG_WHEEL, member, SGLANG_WHEELHOUSE)


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


def test_sglang_builds_the_speculative_sampling_kernel_as_the_check_does() -> None:
    """kernels/ops/speculative/sampling.py -> load_jit -> the generated wrapper and build.ninja."""
    ops = squeeze(sglang_text("sglang/kernels/ops/speculative/sampling.py"))
    assert squeeze(
        'return load_jit( "speculative_sampling", vec_size, deterministic, cuda_files=["speculative/sampling.cuh"], '
        'cuda_wrappers=[ ( "sample", f"tree_speculative_sampling_target_only<{vec_size}, {deterministic_cpp}>", ), ], '
        'extra_dependencies=["flashinfer"], )'
    ) in ops
    assert "vec_size = math.gcd(4, target_probs.shape[-1])" in ops and "deterministic: bool = True" in ops
    assert "from sglang.kernels.ops.speculative.sampling import" in sglang_text(
        "sglang/kernels/ops/speculative/verify_sampling.py"
    )
    # the wrapper: tvm-ffi's includes, the csrc file, one typed export in namespace sglang
    spec = sglang_text("sglang/kernels/jit/utils/compile/spec.py")
    for include in ("tvm/ffi/container/tensor.h", "tvm/ffi/dtype.h", "tvm/ffi/error.h", "tvm/ffi/extra/c_env_api.h",
                    "tvm/ffi/function.h"):  # fmt: skip
        assert f'"#include <{include}>",' in spec and f"#include <{include}>" in CHECK
    assert 'lines.append("namespace sglang {")' in spec
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC({export_name}, ({kernel_name}));" in spec
    assert '(KERNEL_PATH / "csrc" / path).resolve()' in spec
    assert "TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, (tree_speculative_sampling_target_only<4, true>));" in CHECK
    # the flags: base + target + spec (get_default_target_flags) + includes; the link line
    ninja = sglang_text("sglang/kernels/jit/utils/compile/ninja.py")
    assert "toolchain.base_cuda_flags()\n        + toolchain.target_flags()\n        + list(spec.cuda_cflags)" in ninja
    assert 'command = $nvcc -MD -MF "$out.d" $cudaflags -c "$in" -o "$out"' in ninja
    assert 'command = $cxx $in $ldflags -o "$out"' in ninja
    tool = sglang_text("sglang/kernels/jit/utils/compile/toolchain.py")
    assert 'return ["-Xcompiler", "-fPIC"]' in tool
    assert 'return [f"-gencode=arch=compute_{target},code=sm_{target}"]' in tool
    assert 'flags = ["-shared", f"-L{lib_dir}", f"-l{lib_name}"]' in tool
    assert 'return flags + [f"-L{cuda_home()}/lib64", "-lcudart"]' in tool
    assert 'os.environ.get("CXX", "c++")' in tool and 'os.path.join(cuda_home(), "bin", "nvcc")' in tool
    arch = squeeze(sglang_text("sglang/kernels/jit/utils/arch.py"))
    assert squeeze('return [ arch.jit_flag, "-std=c++20", "-O3", "--expt-relaxed-constexpr", ]') in arch
    assert 'return f"-DSGL_CUDA_ARCH={self.major * 100 + self.minor * 10}"' in arch
    assert squeeze('if major == 9: return "a" if major == 12: if minor == 0 and _jit_cuda_version() >= (12, 9): '
                   'return "f" return "a" if major >= 10: return "a" return ""') in arch
    assert 'DEFAULT_INCLUDE: List[str] = [str(KERNEL_PATH / "include")]' in sglang_text(
        "sglang/kernels/jit/utils/compile/paths.py"
    )
    deps = squeeze(sglang_text("sglang/kernels/jit/utils/deps.py"))
    assert squeeze('candidates = [ flashinfer_data / "include", flashinfer_data / "csrc", flashinfer_data / '
                   '"cutlass" / "include", flashinfer_data / "cutlass" / "tools" / "util" / "include", '
                   'flashinfer_data / "spdlog" / "include", ]') in deps
    libinfo = wheel_text("apache_tvm_ffi-0.1.11-*.whl", "tvm_ffi/libinfo.py")
    assert '_rel_top_directory() / "include",' in libinfo
    # the check's own lines are these
    for flag in ('"-Xcompiler", "-fPIC", f"-gencode=arch=compute_{target},code=sm_{target}"',
                 'f"-DSGL_CUDA_ARCH={major * 100 + minor * 10}", "-std=c++20", "-O3", "--expt-relaxed-constexpr"',
                 '["-shared", f"-L{tvm_ffi / \'lib\'}", "-ltvm_ffi", f"-L{home}/lib64", "-lcudart"]',
                 'data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include"'):  # fmt: skip
        assert flag in CHECK, flag
