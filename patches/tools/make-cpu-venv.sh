#!/usr/bin/env bash
# Create the CPU venv that runs the DDTree patch tests (no GPU needed):
#   torch 2.13.0 (CPU build), sglang==0.5.23 --no-deps (the pinned wheel,
#   sha256-checked, from .cache/sglang-wheel/), and the few light deps that
#   `import sglang.srt.server_args`, the arg hooks and SGLang's Triton kernels
#   (under TRITON_INTERPRET=1) need, plus what the scheduler-side modules
#   (schedule_batch, memory_pool, tokenizer_manager, the DFLASH worker) import
#   and what builds the GPU proof's tiny models on CPU (transformers,
#   tokenizers, safetensors), pinned in cpu-venv-constraints.txt (the
#   versions sglang 0.5.23 declares where it pins one). torchvision has no
#   build for torch 2.13 CPU: cpu_import_shims.py stands in for its imports.
#
# Usage: patches/tools/make-cpu-venv.sh [DIR]   (default: .venv-sglang-cpu at
# the repository root; git-ignored). Takes about 2-3 minutes.
#
# torch: on the bundle's build hosts pip's configuration already finds a CPU
# build of torch 2.13.0 on local disk. Elsewhere, point pip at the CPU index:
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu patches/tools/make-cpu-venv.sh
# sglang 0.5.23 declares torch==2.14.1 and heavy GPU deps; installing it with
# --no-deps is deliberate (pip check will list them; the tests do not need them).
#
# The venv never gets patched: tests unpack the pristine wheel into a
# temporary directory, apply the series there, and put it first on PYTHONPATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dest="${1:-$root/.venv-sglang-cpu}"
python="${PYTHON:-python3}"
torch_version="2.13.0"

"$python" - <<'PY'
import sys
if sys.version_info[:2] != (3, 11):
    sys.exit(f"make-cpu-venv: need CPython 3.11 (the pinned wheel is cp311), got {sys.version.split()[0]}")
PY

wheel="$("$python" "$here/series.py" fetch)"
echo "make-cpu-venv: sglang wheel $wheel (sha256 checked)"

if [ -e "$dest" ]; then
  if [ -f "$dest/pyvenv.cfg" ]; then
    echo "make-cpu-venv: rebuilding $dest"
    rm -rf "$dest"
  else
    echo "make-cpu-venv: $dest exists and is not a venv; refusing to replace it" >&2
    exit 1
  fi
fi
# Build in place; a failed build removes the half-made venv.
tmp="$dest"
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp"
pip=("$tmp/bin/python" -m pip --disable-pip-version-check --no-input)

torch_args=()
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  torch_args=(--index-url "$TORCH_INDEX_URL")
fi
"${pip[@]}" install -qq "${torch_args[@]}" "torch==$torch_version"
"$tmp/bin/python" -c "import torch,sys; v=torch.__version__; sys.exit(0 if v.startswith('$torch_version') else f'torch {v} != $torch_version')"

"${pip[@]}" install -qq --no-deps "$wheel"
"${pip[@]}" install -qq -c "$here/cpu-venv-constraints.txt" \
  numpy orjson psutil pybase64 requests triton packaging pillow starlette \
  msgspec pydantic pyzmq tqdm ipython aiohttp pytest \
  transformers tokenizers safetensors sentencepiece compressed-tensors gguf \
  openai partial_json_parser apache-tvm-ffi dill einops setproctitle uvicorn \
  fastapi uvloop

"$tmp/bin/python" - "$here" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import cpu_import_shims
cpu_import_shims.install_torchvision_stand_in()
import torch, triton, transformers, sglang.srt.server_args  # noqa: F401
import sglang.srt.managers.schedule_batch, sglang.srt.managers.tokenizer_manager  # noqa: F401
import sglang.srt.speculative.dflash_worker_v2  # noqa: F401
print(f"make-cpu-venv: torch {torch.__version__}, triton {triton.__version__}, "
      f"transformers {transformers.__version__}, sglang ok")
PY
trap - EXIT
echo "make-cpu-venv: ready at $dest"
