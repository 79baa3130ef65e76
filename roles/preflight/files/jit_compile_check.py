#!/usr/bin/env python
"""Compile what the server's JITs compile, the way they compile it (no GPU needed).

Run by the service venv's interpreter, as the service user, inside the unit's
own sandbox and environment (roles/preflight/files/unit_sandbox_run.py starts
it from a copy of the unit's [Service] section). Nothing is imported from
triton, flashinfer or sglang: their files are located on disk, so the check runs the
same way on a GPU host and on a CPU test host (where torch is absent).

1. Triton 3.8 (triton/runtime/build.py `_build`, backends/nvidia/driver.py):
   `$CC|gcc|clang driver.c -O3 -shared -fPIC -Wno-psabi -o cuda_utils.so
   -l:libcuda.so.1 -L<nvidia/lib> -L<libcuda.so.1 dir> -I<nvidia/include>
   -I<build dir> -I<the interpreter's include dir>`; libcuda.so.1 is found
   with `ldconfig -p` (TRITON_LIBCUDA_PATH first). On a host without a driver
   the toolkit's lib64/stubs/libcuda.so stands in (reported).
2. FlashInfer 0.7.2 (jit/cpp_ext.py, jit/core.py gen_jit_spec, jit/sampling.py):
   `nvcc -c data/csrc/sampling.cu` with FlashInfer's include paths and flags
   (its vendored CCCL first, then -isystem Python, $CUDA_HOME/include with
   curand_kernel.h, tvm-ffi, flashinfer, cutlass, spdlog), then its link line
   `c++ obj -shared -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda`.
3. sglang 0.5.23's JIT of sgl_kernel/speculative/sampling.cuh (the sampled
   tree verification kernel, tree_speculative_sampling_target_only, built at the
   first sampled request; kernels/ops/speculative/sampling.py and
   kernels/jit/utils/compile/): its generated wrapper (tvm-ffi's headers, the
   csrc file, TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, ...<4, true>)), its
   build.ninja's nvcc line (-Xcompiler -fPIC, -gencode for the GPU's target,
   -DSGL_CUDA_ARCH, -std=c++20 -O3 --expt-relaxed-constexpr, the include paths of
   tvm-ffi, kernels/jit/include and the "flashinfer" dependency) and its link line
   (`c++ obj -shared -L<tvm_ffi/lib> -ltvm_ffi -L$CUDA_HOME/lib64 -lcudart`).
4. `ninja` on PATH (FlashInfer and sglang run it) and the JIT caches writable
   (TRITON_CACHE_DIR, ${FLASHINFER_WORKSPACE_BASE:-$HOME}/.cache/flashinfer).

A success is remembered under $XDG_CACHE_HOME (the unit's CacheDirectory) keyed
by everything that decides the result; a rerun with the same inputs is instant.
Prints one JSON object; exit 0 when every check passed (or was cached).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# Environment variables the JITs read (they are part of the cache key).
JIT_ENV = ("CUDA_HOME", "CUDA_PATH", "PATH", "CC", "CXX", "HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
           "TRITON_LIBCUDA_PATH", "FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST", "FLASHINFER_NVCC",
           "FLASHINFER_NVCC_THREADS", "FLASHINFER_EXTRA_CUDAFLAGS", "FLASHINFER_EXTRA_LDFLAGS", "LD_LIBRARY_PATH")
TAIL = 3000


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # a top-level package: located, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def cuda_home() -> str:
    """FlashInfer's get_cuda_path: CUDA_HOME, CUDA_PATH, then `which nvcc`, then /usr/local/cuda."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    return str(Path(nvcc).parent.parent) if nvcc else "/usr/local/cuda"


def run(cmd: list[str], cwd: str | None = None, timeout: float = 1800) -> dict[str, object]:
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
        rc, out = proc.returncode, (proc.stdout + proc.stderr)
    except (OSError, subprocess.TimeoutExpired) as exc:
        rc, out = 127, str(exc)
    return {"ok": rc == 0, "rc": rc, "seconds": round(time.monotonic() - start, 1),
            "command": shlex.join(cmd), "output": out[-TAIL:]}


def needed(lib: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=False).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def version_banner(cmd: list[str]) -> str:
    out = run(cmd, timeout=60)
    return str(out["output"]).strip() if out["ok"] else f"unavailable: {out['output']}"


def libcuda_dirs(stub: Path, scratch: Path) -> tuple[list[str], str]:
    """Triton's libcuda_dirs(); without a driver, a directory whose libcuda.so.1 is the toolkit's stub."""
    if os.environ.get("TRITON_LIBCUDA_PATH"):
        return [os.environ["TRITON_LIBCUDA_PATH"]], "TRITON_LIBCUDA_PATH"
    listing = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    dirs = sorted({str(Path(line.split()[-1]).parent) for line in listing.splitlines() if "libcuda.so.1" in line})
    if dirs:
        return dirs, "the driver's libcuda.so.1 (ldconfig -p)"
    (scratch / "libcuda").mkdir()
    (scratch / "libcuda" / "libcuda.so.1").symlink_to(stub)
    return [str(scratch / "libcuda")], f"no driver on this host: linked against the toolkit's stub {stub}"


def triton_driver(triton: Path, stub: Path, scratch: Path) -> dict[str, object]:
    nvidia = triton / "backends" / "nvidia"
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return {"ok": False, "output": "no C compiler: CC unset, neither gcc nor clang on PATH (Triton needs one)"}
    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    py_include = sysconfig.get_paths(scheme=scheme)["include"]
    if not (Path(py_include) / "Python.h").is_file():
        return {"ok": False, "output": f"{py_include}/Python.h does not exist (the interpreter's -dev package)"}
    build = scratch / "triton"
    build.mkdir()
    lib_dirs, libcuda_source = libcuda_dirs(stub, scratch)
    so = build / f"cuda_utils{sysconfig.get_config_var('EXT_SUFFIX')}"
    cmd = [cc, str(nvidia / "driver.c"), "-O3", "-shared", "-fPIC", "-Wno-psabi", "-o", str(so), "-l:libcuda.so.1"]
    cmd += [f"-L{d}" for d in [str(nvidia / "lib"), *lib_dirs]]
    cmd += [f"-I{d}" for d in [str(nvidia / "include"), str(build), py_include]]
    result = run(cmd, cwd=str(build))
    result["libcuda"] = libcuda_source
    if result["ok"]:
        result["needed"] = needed(so)
        result["ok"] = "libcuda.so.1" in result["needed"]
    return result


def arch_flags(arch: str) -> list[str]:
    """FlashInfer's CompilationContext for one compute capability (FLASHINFER_CUDA_ARCH_LIST wins)."""
    wanted = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", arch).split()
    flags = []
    for item in wanted:
        major, minor = item.split(".")
        if not minor[-1].isalpha():
            m, n = int(major), int(minor)
            minor = (f"{n}a" if m == 9 or (m >= 10 and not (m == 12 and n == 0)) else ("0f" if m == 12 else str(n)))
        flags.append(f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}")
    return flags


def flashinfer_sampling(flashinfer: Path, tvm_ffi: Path, home: str, arch: str, scratch: Path) -> dict[str, object]:
    data = flashinfer / "data"
    nvcc = os.environ.get("FLASHINFER_NVCC", f"{home}/bin/nvcc")
    common = ["-DPy_LIMITED_API=0x03090000", "-D_GLIBCXX_USE_CXX11_ABI=1"]  # torch 2.14 wheels: C++11 ABI
    common += [f"-I{data / 'cccl' / d}" for d in ("cub", "libcudacxx/include", "thrust")]
    system = [sysconfig.get_path("include"), *([f"{home}/include"] if home != "/usr" else [])]
    system += [str(tvm_ffi / "include"), str(tvm_ffi / "include"), str(data / "include"), str(data / "csrc"),
               str(data / "cutlass" / "include"), str(data / "cutlass" / "tools" / "util" / "include"),
               str(data / "spdlog" / "include")]
    for directory in system:
        common += ["-isystem", directory]
    cuda = (["-ccbin", os.environ["CC"]] if os.environ.get("CC") else []) + common
    cuda += ["--compiler-options=-fPIC", "--expt-relaxed-constexpr", "-static-global-template-stub=false"]
    cuda += [*arch_flags(arch), "-DFLASHINFER_ENABLE_FP8_E8M0", "-DFLASHINFER_ENABLE_FP4_E2M1"]
    cuda += ["-std=c++17", f"--threads={os.environ.get('FLASHINFER_NVCC_THREADS', '1')}", "-use_fast_math",
             "-Xfatbin=-compress-all", "--compress-mode=size", "-DFLASHINFER_ENABLE_F16",
             "-DFLASHINFER_ENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2",
             "-DNDEBUG", "-O3", *shlex.split(os.environ.get("FLASHINFER_EXTRA_CUDAFLAGS", ""))]
    build = scratch / "flashinfer"
    build.mkdir()
    obj, so = build / "csrc_sampling.cuda.o", build / "sampling_check.so"
    compiled = run([nvcc, "--generate-dependencies-with-compile", "-MF", f"{obj}.d", *cuda,
                    "-c", str(data / "csrc" / "sampling.cu"), "-o", str(obj)], cwd=str(build))
    if not compiled["ok"]:
        return compiled
    ldflags = ["-shared", f"-L{home}/lib64", f"-L{home}/lib64/stubs", "-lcudart", "-lcuda",
               *shlex.split(os.environ.get("FLASHINFER_EXTRA_LDFLAGS", ""))]
    linked = run([os.environ.get("CXX", "c++"), str(obj), *ldflags, "-o", str(so)], cwd=str(build))
    result = {"ok": bool(linked["ok"]), "compile": compiled, "link": linked, "seconds": compiled["seconds"]}
    if linked["ok"]:
        result["needed"] = needed(so)
        result["ok"] = any(n.startswith("libcudart.so") for n in result["needed"])
    return result


def sglang_target(arch: str, home: str) -> tuple[int, int, str]:
    """sglang's JIT target for a compute capability (kernels/jit/utils/arch.py _cuda_arch_suffix):
    9.x and >= 10 take the "a" target, 12.0 "f" with nvcc >= 12.9 (else "a"), older plain."""
    m = re.fullmatch(r"([0-9]+)\.([0-9]+)[a-z]?", arch)
    if m is None:
        raise ValueError(f"compute capability {arch!r}: X.Y is required")
    major, minor = int(m.group(1)), int(m.group(2))
    release = re.search(r"release (\d+)\.(\d+)", version_banner([f"{home}/bin/nvcc", "--version"]))
    nvcc = (int(release.group(1)), int(release.group(2))) if release else (0, 0)
    suffix = "a" if major == 9 or major >= 10 else ""
    if major == 12 and minor == 0 and nvcc >= (12, 9):
        suffix = "f"
    return major, minor, suffix


SGLANG_SAMPLING_WRAPPER = (
    "#include <tvm/ffi/container/tensor.h>\n#include <tvm/ffi/dtype.h>\n#include <tvm/ffi/error.h>\n"
    "#include <tvm/ffi/extra/c_env_api.h>\n#include <tvm/ffi/function.h>\n#include \"{source}\"\n"
    "namespace sglang {{\n"
    "TVM_FFI_DLL_EXPORT_TYPED_FUNC(sample, (tree_speculative_sampling_target_only<4, true>));\n"
    "}}  // namespace sglang\n"
)


def sglang_speculative_sampling(sglang: Path, flashinfer: Path, tvm_ffi: Path, home: str, arch: str, *,
                                scratch: Path) -> dict[str, object]:  # fmt: skip
    """load_jit("speculative_sampling", 4, True, cuda_files=["speculative/sampling.cuh"], cuda_wrappers=[("sample",
    "tree_speculative_sampling_target_only<4, true>")], extra_dependencies=["flashinfer"]) by hand: the wrapper
    and the compile and link commands sglang's build.ninja runs (vec size 4: vocabularies divisible by 4)."""
    jit, data = sglang / "kernels" / "jit", flashinfer / "data"
    source = (jit / "csrc" / "speculative" / "sampling.cuh").resolve()
    build = scratch / "sglang"
    build.mkdir()
    (build / "cuda.cu").write_text(SGLANG_SAMPLING_WRAPPER.format(source=source))
    major, minor, suffix = sglang_target(arch, home)
    target = f"{major}{minor}{suffix}"
    includes = [tvm_ffi / "include", jit / "include", data / "include", data / "csrc", data / "cutlass" / "include",
                data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include"]  # fmt: skip
    cuda = ["-Xcompiler", "-fPIC", f"-gencode=arch=compute_{target},code=sm_{target}",
            f"-DSGL_CUDA_ARCH={major * 100 + minor * 10}", "-std=c++20", "-O3", "--expt-relaxed-constexpr",
            *[f"-I{path}" for path in includes]]  # fmt: skip
    obj, so = build / "cuda_0.o", build / "speculative_sampling_check.so"
    compiled = run([f"{home}/bin/nvcc", "-MD", "-MF", f"{obj}.d", *cuda, "-c", str(build / "cuda.cu"), "-o",
                    str(obj)], cwd=str(build))  # fmt: skip
    if not compiled["ok"]:
        return compiled
    ldflags = ["-shared", f"-L{tvm_ffi / 'lib'}", "-ltvm_ffi", f"-L{home}/lib64", "-lcudart"]
    linked = run([os.environ.get("CXX", "c++"), str(obj), *ldflags, "-o", str(so)], cwd=str(build))
    result = {"ok": bool(linked["ok"]), "compile": compiled, "link": linked, "seconds": compiled["seconds"],
              "target": f"sm_{target}"}  # fmt: skip
    if linked["ok"]:
        result["needed"] = needed(so)
        result["ok"] = any(n.startswith("libcudart.so") for n in result["needed"]) and "libtvm_ffi.so" in result[
            "needed"]
    return result


def writable(path: Path) -> dict[str, object]:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
        return {"ok": True, "output": str(path)}
    except OSError as exc:
        return {"ok": False, "output": f"{path}: {exc}"}


def cache_key(files: list[Path], arch: str, home: str) -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for name in JIT_ENV:
        digest.update(f"{name}={os.environ.get(name, '')}\n".encode())
    digest.update(f"{sys.version}\n{arch}\n".encode())
    for cmd in ([f"{home}/bin/nvcc", "--version"], ["gcc", "--version"], [os.environ.get("CXX", "c++"), "--version"]):
        digest.update(version_banner(cmd).encode())
    for path in files:
        digest.update(f"{path}:{path.stat().st_size}:{path.stat().st_mtime_ns}\n".encode() if path.exists() else b"-")
    return digest.hexdigest()


def detect_arch(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("FLASHINFER_CUDA_ARCH_LIST"):
        return os.environ["FLASHINFER_CUDA_ARCH_LIST"].split()[0]
    out = run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=60)
    caps = sorted(set(str(out["output"]).split())) if out["ok"] else []
    return caps[0] if caps else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--arch", default="auto", help="compute capability X.Y, or auto (the GPUs')")
    parser.add_argument("--if-installed", action="store_true",
                        help="report 'skipped' instead of failing when triton, flashinfer, tvm_ffi or sglang "
                        "is not installed")
    args = parser.parse_args(argv)
    home = cuda_home()
    packages = {name: package_dir(name) for name in ("triton", "flashinfer", "tvm_ffi", "sglang")}
    report: dict[str, object] = {"cuda_home": home, "python": sys.executable, "user": os.getuid(),
                                 "packages": {k: str(v) if v else None for k, v in packages.items()}}
    missing = [name for name, path in packages.items() if path is None]
    if missing:
        report.update(ok=args.if_installed, skipped=True, reason=f"not installed in {sys.prefix}: {', '.join(missing)}")
        print(json.dumps(report))
        return 0 if args.if_installed else 1
    triton, flashinfer, tvm_ffi, sglang = (packages[n] for n in ("triton", "flashinfer", "tvm_ffi", "sglang"))
    assert triton and flashinfer and tvm_ffi and sglang
    arch = detect_arch(args.arch)
    if not re.fullmatch(r"[0-9]+\.[0-9]+[a-z]?", arch):
        report.update(ok=False, reason=f"compute capability '{arch}': no GPU answered; pass --arch X.Y")
        print(json.dumps(report))
        return 1
    stub = Path(home) / "lib64" / "stubs" / "libcuda.so"
    inputs = [triton / "backends" / "nvidia" / "driver.c", flashinfer / "data" / "csrc" / "sampling.cu", stub,
              sglang / "kernels" / "jit" / "csrc" / "speculative" / "sampling.cuh",
              sglang / "kernels" / "jit" / "include" / "sgl_kernel" / "speculative" / "sampling.cuh",
              Path(home) / "lib64" / "libcudart.so", Path(home) / "include" / "curand_kernel.h",
              Path(sysconfig.get_path("include")) / "Python.h"]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sglang-deploy-jit-check"
    key = cache_key(inputs, arch, home)
    report.update(arch=arch, key=key)
    if (cache / key).is_file():
        report.update(ok=True, cached=True)
        print(json.dumps(report))
        return 0
    checks: dict[str, dict[str, object]] = {
        "ninja": {"ok": shutil.which("ninja") is not None, "output": shutil.which("ninja") or "not on PATH"},
        "triton_cache": writable(Path(os.environ.get("TRITON_CACHE_DIR") or Path.home() / ".triton" / "cache")),
        "flashinfer_cache": writable(
            Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or Path.home()) / ".cache" / "flashinfer"),
    }
    with tempfile.TemporaryDirectory(prefix="jit-check-") as tmp:
        checks["triton_driver_c"] = triton_driver(triton, stub, Path(tmp))
        checks["flashinfer_sampling_cu"] = flashinfer_sampling(flashinfer, tvm_ffi, home, arch, Path(tmp))
        checks["sglang_speculative_sampling"] = sglang_speculative_sampling(sglang, flashinfer, tvm_ffi, home, arch,
                                                                            scratch=Path(tmp))  # fmt: skip
    ok = all(bool(c["ok"]) for c in checks.values())
    report.update(ok=ok, cached=False, checks=checks)
    if ok:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / key).write_text(json.dumps({"arch": arch, "time": time.time()}) + "\n")
    print(json.dumps(report))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
