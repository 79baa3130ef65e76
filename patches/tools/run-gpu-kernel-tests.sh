#!/usr/bin/env bash
# Run the DDTree kernel-level checks on a CUDA device (no TRITON_INTERPRET):
#   - SGLang's extend_attention_fwd with the packed DDTree mask: widths from
#     budget + 1 match a torch reference, widths from the block size do not;
#   - verify_tree_greedy_triton == ddtree_greedy_walk (1000 rounds on GPU);
#   - the ddtree_utils properties on CUDA tensors where they apply;
#   - sglang's tree_speculative_sampling_target_only (the JIT-built sampled
#     verification kernel) == the series' torch twin on 10,000 random trees;
#   - the host-cost benchmark with --device cuda;
#   - the draft top-K host copy before/after (how long the host is blocked
#     with GPU work queued: the sync the previous tree build caused).
# Needs: a CUDA GPU, python3.11 with torch (CUDA build) and triton, the pinned
# sglang wheel (fetched into .cache/sglang-wheel/ if absent) and pytest.
# Nothing is installed into that python's sglang: the series is applied to a
# temporary copy of the pristine wheel, first on PYTHONPATH.
#
# Usage: patches/tools/run-gpu-kernel-tests.sh [PYTHON]   (default: python3)
# Writes a summary to ${OUT:-./ddtree-gpu-results}/ (kernels.jsonl, pytest.log,
# bench.md, host_copy.md, env.txt) and exits non-zero if any check fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="${1:-python3}"
out="${OUT:-$PWD/ddtree-gpu-results}"
mkdir -p "$out"

# DDTREE_TEST_DEVICE=cpu runs the same flow on CPU (TRITON_INTERPRET=1), to
# check this script's plumbing on a machine without a GPU.
device="${DDTREE_TEST_DEVICE:-cuda}"
if [ "$device" = "cpu" ]; then
  export TRITON_INTERPRET=1
else
  "$py" - <<'PY' || { echo "run-gpu-kernel-tests: no usable CUDA torch" >&2; exit 2; }
import sys, torch, triton
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False")
print(f"torch {torch.__version__} cuda {torch.version.cuda} triton {triton.__version__} "
      f"gpu {torch.cuda.get_device_name(0)}")
PY
fi
{ "$py" -c "import torch,triton;print('torch',torch.__version__,'cuda',torch.version.cuda,'triton',triton.__version__)"
  "$py" -c "import torch;print('gpu',torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
  nvidia-smi -L 2>/dev/null; } > "$out/env.txt" 2>&1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/series.py" apply "$tmp/tree" >/dev/null || { echo "run-gpu-kernel-tests: series does not apply" >&2; exit 1; }

rc=0
rm -f "$out/kernels.jsonl"
env -u PYTHONPATH DDTREE_PATCHED_TREE="$tmp/tree" DDTREE_TEST_DEVICE="$device" \
  DDTREE_KERNEL_REPORT="$out/kernels.jsonl" \
  "$py" -m pytest -q -p no:cacheprovider -W ignore::pytest.PytestConfigWarning \
  -o python_files='check_*.py' --rootdir="$root" \
  "$root/tests/patches/cpu/check_triton_kernels.py" \
  "$root/tests/patches/cpu/check_ddtree_utils.py" \
  "$root/tests/patches/cpu/check_ddtree_device_build.py" \
  "$root/tests/patches/cpu/check_ddtree_sampling.py" 2>&1 | tee "$out/pytest.log" || true
grep -qE "[0-9]+ passed" "$out/pytest.log" && ! grep -qE "[0-9]+ (failed|error)" "$out/pytest.log" || rc=1

"$py" "$root/benchmarks/ddtree_tree_build.py" --tree "$tmp/tree" --device "$device" --reps 50 \
  --json "$out/bench.json" 2>&1 | tee "$out/bench.md" || rc=1
"$py" "$root/benchmarks/ddtree_topk_host_copy.py" --tree "$tmp/tree" --device "$device" \
  --json "$out/host_copy.json" 2>&1 | tee "$out/host_copy.md" || rc=1
echo "run-gpu-kernel-tests: rc=$rc, results in $out"
exit $rc
