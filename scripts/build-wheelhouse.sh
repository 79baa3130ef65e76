#!/usr/bin/env bash
# Build, on the controller, the offline wheelhouse the systemd test host needs
# (the same path an air-gapped GPU cluster takes):
#   - every wheel of requirements/testhost.lock        (cp312, manylinux x86_64, hash-checked)
#   - every wheel of requirements/cuda-13.0.3-wheels.lock (CUDA 13.0.3 nvcc/cudart/cccl/nvrtc)
#   - the real sglang 0.5.23 wheel, --no-deps, sha256-pinned below (patched by roles/sglang_patches)
#   - this project's own wheel (repro-py), built reproducibly (SOURCE_DATE_EPOCH)
# and writes DIR/SHA256SUMS. A second run with unchanged inputs only rebuilds
# the project wheel (seconds) and leaves every file untouched.
#
# Usage: scripts/build-wheelhouse.sh DIR [--python-version 3.12] [--platform manylinux_2_39_x86_64]
#        scripts/build-wheelhouse.sh DIR --production   (the sglang 0.5.23 production lock, cp312: ~4.4 GB)
#        scripts/build-wheelhouse.sh DIR --jit          (only the JIT check's wheels, hash-checked from the
#            production lock: triton, flashinfer-python, apache-tvm-ffi, ninja; cp312: ~320 MB)
# Env:   PYTHON (default: .venv/bin/python, else python3) used for `pip download` / `pip wheel`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/requirements"
# The sglang 0.5.23 wheel the test host (Ubuntu 24.04) installs with --no-deps (Python 3.12).
sglang_version="0.5.23"
sglang_wheel="sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"
sglang_sha256="8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6"

dir=""
pyver="3.12"
platform="manylinux_2_39_x86_64"
production=0
jit=0
# The wheels whose files the JIT compile check uses (roles/preflight/files/jit_compile_check.py).
jit_packages="triton flashinfer-python apache-tvm-ffi ninja"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --python-version) pyver="$2"; shift ;;
        --platform) platform="$2"; shift ;;
        --production) production=1; pyver="3.12"; platform="manylinux_2_39_x86_64" ;;
        --jit) jit=1; pyver="3.12"; platform="manylinux_2_39_x86_64" ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        -*) echo "build-wheelhouse: unknown option '$1'" >&2; exit 2 ;;
        *) dir="$1" ;;
    esac
    shift
done
[[ -n "$dir" ]] || { echo "usage: $0 DIR [--production]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
# Registry only: ignore the machine's pip configuration (local wheel dirs, constraints).
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
unset PIP_FIND_LINKS PIP_CONSTRAINT PIP_EXTRA_INDEX_URL PIP_NO_INDEX || true

if [[ $production -eq 1 ]]; then
    locks=("$req/sglang-0.5.23-cu130.lock")
elif [[ $jit -eq 1 ]]; then
    # The production lock's entries (with every hash) of the JIT check's packages.
    jit_lock="$dir/.jit-requirements.lock"
    "$python" - "$req/sglang-0.5.23-cu130.lock" "$jit_lock" $jit_packages <<'PY'
import re, sys
lock, out, names = sys.argv[1], sys.argv[2], set(sys.argv[3:])
blocks = re.split(r"\n(?=[A-Za-z0-9])", open(lock).read())
keep = [b for b in blocks if (m := re.match(r"([A-Za-z0-9._-]+)==", b)) and m.group(1) in names]
missing = names - {re.match(r"([A-Za-z0-9._-]+)==", b).group(1) for b in keep}
if missing:
    sys.exit(f"build-wheelhouse: not in {lock}: {sorted(missing)}")
open(out, "w").write("\n".join(l for b in keep for l in b.splitlines() if not l.strip().startswith("#")) + "\n")
PY
    locks=("$jit_lock")
else
    locks=("$req/testhost.lock" "$req/cuda-13.0.3-wheels.lock")
fi

# `pip download --platform` takes exact tags: list every manylinux tag that a
# host with this glibc accepts (manylinux_2_39 down to manylinux_2_17 and the
# legacy aliases), as pip does for the running interpreter.
plat_args=()
if [[ "$platform" =~ ^manylinux_2_([0-9]+)_(x86_64|aarch64)$ ]]; then
    arch=${BASH_REMATCH[2]}
    for ((m = BASH_REMATCH[1]; m >= 5; m--)); do plat_args+=(--platform "manylinux_2_${m}_$arch"); done
    plat_args+=(--platform "manylinux2014_$arch" --platform "manylinux2010_$arch" --platform "manylinux1_$arch")
else
    plat_args+=(--platform "$platform")
fi

start=$SECONDS
# The stamp records what the downloaded part was built from; when it matches and
# every listed file still has its checksum, nothing is downloaded again.
stamp_want=$( { echo "py=$pyver platform=$platform sglang=$sglang_sha256 production=$production jit=$jit";
                sha256sum "${locks[@]}" | awk '{print $1}'; } | sha256sum | awk '{print $1}')
stamp="$dir/.downloads.stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$stamp_want" && -f "$dir/SHA256SUMS" ]] \
    && (cd "$dir" && grep -v ' repro_py-' SHA256SUMS | sha256sum --quiet -c -); then
    echo "build-wheelhouse: downloads up to date"
else
    rm -f "$stamp"
    for lock in "${locks[@]}"; do
        echo "build-wheelhouse: downloading $(basename "$lock") for cp${pyver/./} $platform"
        "$python" -m pip download --quiet --require-hashes --no-deps --only-binary=:all: \
            --python-version "$pyver" "${plat_args[@]}" --implementation cp \
            -r "$lock" -d "$dir"
    done
    if [[ $production -eq 0 && $jit -eq 0 ]]; then
        if ! echo "$sglang_sha256  $dir/$sglang_wheel" | sha256sum --quiet -c - >/dev/null 2>&1; then  # absent or stale: download
            echo "build-wheelhouse: downloading sglang==$sglang_version (--no-deps)"
            tmpreq=$(mktemp)
            echo "sglang==$sglang_version --hash=sha256:$sglang_sha256" > "$tmpreq"
            "$python" -m pip download --quiet --require-hashes --no-deps --only-binary=:all: \
                --python-version "$pyver" "${plat_args[@]}" --implementation cp \
                -r "$tmpreq" -d "$dir"
            rm -f "$tmpreq"
        fi
    fi
fi

# This project's wheel (not part of the --jit set).
if [[ $jit -eq 0 ]]; then
    # Reproducible bytes, so an unchanged tree gives the same
    # sha256 and the file is left alone (the roles see no change).
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 315532800)
    cp -rL "$root/pyproject.toml" "$root/repro_py" "$build/"
    find "$build" -name '__pycache__' -prune -exec rm -rf {} +
    find "$build" -exec touch -h -d "@$epoch" {} +
    # Isolated build: the backend (setuptools, as pyproject.toml pins) comes from the registry.
    SOURCE_DATE_EPOCH=$epoch "$python" -m pip wheel --quiet --no-deps -w "$build/out" "$build" >/dev/null
    new=$(ls "$build"/out/repro_py-*.whl)
    name=$(basename "$new")
    if [[ -f "$dir/$name" ]] && cmp -s "$new" "$dir/$name"; then
        echo "build-wheelhouse: $name unchanged"
    else
        find "$dir" -maxdepth 1 -name 'repro_py-*.whl' ! -name "$name" -delete
        cp "$new" "$dir/$name"
        echo "build-wheelhouse: $name built"
    fi

fi

# SHA256SUMS and the stamp are replaced only when their content changes, through a
# temporary file beside the wheelhouse (same filesystem, so the rename is atomic): a
# concurrent copy of the wheelhouse (a test host being deployed from it) never lists a
# temporary file, and a run that changed nothing changes nothing on disk. The temporary
# name ends in .tmp, which the bundle manifest never covers (repro_py/manifest.py): a
# `make manifest` while a wheelhouse is being written once listed one, and every clone
# then failed `sha256sum -c MANIFEST.sha256` on a file it never had.
replace_if_changed() {  # replace_if_changed TARGET < content
    local tmp
    tmp=$(mktemp --suffix=.tmp "$(dirname "$dir")/.$(basename "$dir")-$(basename "$1").XXXXXX")
    cat > "$tmp"
    if [[ -f "$1" ]] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; else chmod 644 "$tmp" && mv -f "$tmp" "$1"; fi
}
(cd "$dir" && sha256sum -- *.whl) | replace_if_changed "$dir/SHA256SUMS"
echo "$stamp_want" | replace_if_changed "$stamp"
echo "build-wheelhouse: $dir: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1), $((SECONDS - start)) s"
