#!/usr/bin/env python
"""Build the link-time stub lib64/stubs/libcuda.so for a toolkit that has none.

NVIDIA's CUDA wheels ship no driver stub, but the JIT link lines of FlashInfer
(`-L$CUDA_HOME/lib64/stubs -lcuda`) and sglang's own JIT kernels expect one:
the real libcuda.so.1 belongs to the driver, and a toolkit provides only a
stub to link against. This stub exports every driver API entry point that
the toolkit's own cuda.h declares (with and without the _v2/_ptds/_ptsz
remapping the header applies), each returning CUDA_ERROR_STUB_LIBRARY (34),
under the soname libcuda.so.1: a module linked against it records
DT_NEEDED libcuda.so.1 and loads the driver's library at run time. The
stub's own file name (libcuda.so) is never looked up by the dynamic loader.

Usage: libcuda_stub.py CUDA_HOME OUTPUT [--cc gcc]
Prints one JSON line: {"symbols": N, "output": path}. Exit 1 on failure.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# `CUresult CUDAAPI cuFoo(...)` after preprocessing: an identifier starting with
# `cu` + capital letter directly followed by an opening parenthesis. Function
# pointer typedefs are named PFN_cu... and do not match.
DECLARATION = re.compile(r"(?<![A-Za-z0-9_])(cu[A-Z][A-Za-z0-9_]*)\s*\(")
CUDA_ERROR_STUB_LIBRARY = 34
# Preprocessor settings whose remappings the driver library exports side by side.
VARIANTS = ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"], ["-D__CUDA_API_VERSION_INTERNAL"])


def driver_symbols(cuda_h: Path, cc: str) -> list[str]:
    names: set[str] = set()
    for flags in VARIANTS:
        out = subprocess.run(
            [cc, "-E", "-P", "-x", "c", *flags, "-I", str(cuda_h.parent), str(cuda_h)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        names.update(DECLARATION.findall(out))
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("cuda_home", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--cc", default="gcc")
    args = parser.parse_args(argv)
    cuda_h = args.cuda_home / "include" / "cuda.h"
    if not cuda_h.is_file():
        print(f"libcuda_stub: {cuda_h} does not exist", file=sys.stderr)
        return 1
    symbols = driver_symbols(cuda_h, args.cc)
    if len(symbols) < 100:  # cuda.h 13.0 declares several hundred
        print(f"libcuda_stub: only {len(symbols)} driver entry points found in {cuda_h}", file=sys.stderr)
        return 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "libcuda_stub.c"
        source.write_text(
            "/* Link-time stub of the CUDA driver API (generated from cuda.h). */\n"
            + "".join(f"int {name}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}\n" for name in symbols)
        )
        built = Path(tmp) / "libcuda.so"
        subprocess.run(
            [args.cc, "-shared", "-fPIC", "-O0", "-Wl,-soname,libcuda.so.1", "-o", str(built), str(source)],
            check=True,
        )
        shutil.copyfile(built, args.output)
        args.output.chmod(0o644)
    print(json.dumps({"symbols": len(symbols), "output": str(args.output)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
