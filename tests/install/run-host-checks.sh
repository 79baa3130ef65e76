#!/usr/bin/env bash
# The toolchain, driver and model side on a BARE Ubuntu 24.04 systemd host
# (podman, reached over SSH; the test-host image has no compiler, no Python headers, no
# python3-venv), in `make test`:
#   1. site.yml (inventory/local's variables; with CHECK_MODE=1 first --check
#      --diff on the bare host) installs the host compiler and the
#      Python headers itself, with the real triton 3.8.0 / flashinfer 0.7.2 /
#      apache-tvm-ffi / ninja wheels of the production lock in the venv. The
#      first run defers the version gate's JIT check (no unit yet) and runs it
#      in the staged unit's sandbox before the first start; the second run
#      (idempotent) checks again (cached or compiled): triton's driver.c
#      compiled with gcc against Python.h, FlashInfer's sampling.cu compiled with
#      nvcc (curand_kernel.h from the toolkit) and linked with -lcudart -lcuda,
#      as the service user in the unit's own sandbox. A reconfigure finds it cached.
#      Then curand_kernel.h is removed: the check must fail with nvcc's error.
#   2. A local signed apt repository (tests/install/aptrepo/build-repo.sh) of
#      dummy packages with the real names and versions: cuda_toolkit's apt method
#      and nvidia_driver (install, NVSwitch, NVLSM): keyring checksum, deb822
#      source, pins (newer decoys in the index), installed versions, daemons,
#      the unit ordered after fabric manager. Refusals: a wrong keyring checksum,
#      a package upgraded by hand past its pin, fabric manager at another version
#      than the driver (and stopped), a GPU not registered with the NVLink fabric
#      (the stand-in nvidia-smi -q). Fabric manager is R580's nvidia-fabricmanager
#      580.x (NVIDIA's name), found by nv-fabricmanager --version. Check-only
#      mode holds the driver's packages (an apt upgrade is refused) and refuses a
#      drift from the loaded kernel module.
#   3. The model check as the service user: a good model, a single-file drafter,
#      and a broken directory (missing, unreadable and truncated shards).
#   4. playbooks/collect.yml: model and drafter checksums; a second run hashes nothing.
# Before those: testhost/up.sh and down.sh recover a container whose processes were
# killed behind podman's back (tests/install/test_testhost_up.py).
#
# Usage: tests/install/run-host-checks.sh        (KEEP=1 keeps the container, CHECK_MODE=1 adds --check)
# Env:   CONTAINER (sglang-hostchecks), TESTHOST_IMAGE (testhost/common.sh),
#        HOSTCHECKS_SSH_PORT (31053: its sshd on 127.0.0.1, as hostchecks/hosts.yml reaches it),
#        REPO_PORT (31052; the service uses 31051), WHEELHOUSE (.whl), JIT_WHEELHOUSE (.whl-jit),
#        HOSTCHECKS_LOGS (the steps' logs; default a new /tmp/host-checks.XXXXXX)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=testhost/common.sh
. "$root/testhost/common.sh"
export CONTAINER="${CONTAINER:-sglang-hostchecks}"
export HOSTCHECKS_SSH_PORT="${HOSTCHECKS_SSH_PORT:-31053}"
export WHEELHOUSE="${WHEELHOUSE:-$root/.whl}"
jit_wheelhouse="${JIT_WHEELHOUSE:-$root/.whl-jit}"
repo_port="${REPO_PORT:-31052}"
export ANSIBLE_COLLECTIONS_PATH="$root/.collections"  # the checkout as ddtree.sglang (scripts/link-collection.sh)
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
here="$root/tests/install/hostchecks"
play=(.venv/bin/ansible-playbook -i "$here/hosts.yml")
# Each step's log: in HOSTCHECKS_LOGS (make test: results/host-checks, emptied by the Makefile), else in a new /tmp
# directory.
if [[ -n "${HOSTCHECKS_LOGS:-}" ]]; then
    log=$HOSTCHECKS_LOGS
    mkdir -p "$log"
else
    log=$(mktemp -d /tmp/host-checks.XXXXXX)
fi
echo "host-checks: logs in $log"
t_all=$SECONDS

step() { echo "host-checks: $*"; }
fail() { step "FAILED: $*"; exit 1; }
timed() {  # name command...   (must succeed)
    local name=$1; shift
    local t0=$SECONDS
    if ! "$@" > "$log/$name.log" 2>&1; then
        tail -60 "$log/$name.log"; fail "$name"
    fi
    step "$name: $((SECONDS - t0)) s"
}
refused() {  # name expected-text command...   (must fail, saying expected-text)
    local name=$1 want=$2; shift 2
    local t0=$SECONDS
    if "$@" > "$log/$name.log" 2>&1; then tail -30 "$log/$name.log"; fail "$name: it passed"; fi
    # ansible folds long messages: compare with whitespace squeezed
    tr -s ' \n' ' ' < "$log/$name.log" | grep -qF -- "$want" || { tail -40 "$log/$name.log"; fail "$name: no '$want'"; }
    step "$name: refused as expected ($((SECONDS - t0)) s)"
}
# The outcome (ok, skipping, changed, fatal) of the last run of the task whose name contains $2 in step $1's log.
task_outcome() {
    awk -v t="$2" 'index($0, "TASK [") && index($0, t) { f = 1; next }
                   f && /^(ok|skipping|changed|fatal|failed):/ { o = $1; sub(/:$/, "", o); f = 0 } END { print o }' "$log/$1.log"
}
changed_count() { grep -E "^sglang-hostchecks +:" "$log/$1.log" | sed -E 's/.*changed=([0-9]+).*/\1/'; }
in_host() { podman exec "$CONTAINER" "$@"; }
in_host_stdin() { podman exec -i "$CONTAINER" "$@"; }

timed wheelhouse scripts/build-wheelhouse.sh "$WHEELHOUSE"
timed jit-wheelhouse scripts/build-wheelhouse.sh "$jit_wheelhouse" --jit
# The facts the JIT check mirrors, read from those wheels.
JIT_WHEELHOUSE="$jit_wheelhouse" REQUIRE_JIT_WHEELS=1 timed jit-wheel-facts \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/install/test_jit_wheel_facts.py
# up.sh and down.sh with a container whose processes were killed behind podman's back.
SGLANG_TESTHOST=1 timed testhost-up .venv/bin/python -m pytest -q -p no:cacheprovider tests/install/test_testhost_up.py
# The venv: inventory/local's local wheels plus the JIT check's wheels (sha256 from SHA256SUMS).
"${PYTHON:-.venv/bin/python}" - "$jit_wheelhouse" "$log/jit-wheels.json" <<'PY'
import json, pathlib, sys
jit = pathlib.Path(sys.argv[1])
wheels = [{"file": "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"}, {"file": "repro_py-0.1.0-py3-none-any.whl"}]
for line in (jit / "SHA256SUMS").read_text().splitlines():
    sha, name = line.split()
    wheels.append({"file": str(jit / name), "sha256": sha})
pathlib.Path(sys.argv[2]).write_text(json.dumps({"python_env_local_wheels": wheels}))
PY

testhost_remove "$CONTAINER" 2>/dev/null || true
cleanup() {
    [[ -n "${repo_pid:-}" ]] && kill "$repo_pid" 2>/dev/null
    [[ "${KEEP:-0}" == 1 ]] || testhost_remove "$CONTAINER" 2>/dev/null || true
}
trap cleanup EXIT
# GPU stand-ins of a B300 (compute capability 10.3, NVSwitch fabric registered) for the NVSwitch checks.
# The plays reach it over SSH as a GPU host (hostchecks/hosts.yml); podman exec only inspects and breaks it.
TESTHOST_GPU_PROFILE=b300 TESTHOST_SSH_PORT="$HOSTCHECKS_SSH_PORT" timed boot testhost/up.sh "$CONTAINER"
in_host sh -c 'command -v gcc || command -v cc || ls /usr/include/python3.12/Python.h' >/dev/null 2>&1 \
    && fail "the image is not bare: it has a compiler or Python headers already"

# --- 1. site.yml on the bare host; the JIT check before the first start and on every run after
site=("${play[@]}" site.yml -e "@$log/jit-wheels.json")
# --check --diff on the bare host (~3 min, most of it the wheelhouse diff): CHECK_MODE=1.
[[ "${CHECK_MODE:-0}" == 1 ]] && timed check-bare "${site[@]}" --check --diff
timed site-1 "${site[@]}"
grep -q "JIT check deferred" "$log/site-1.log" || fail "site-1: the version gate did not defer the JIT check (no unit yet)"
# ...and sglang_service ran it in the staged unit's sandbox before the first start.
grep -q "JIT check passed as uid" "$log/site-1.log" \
    || fail "site-1: the deferred JIT check did not run in the staged unit's sandbox before the first start"
in_host gcc --version | head -1
in_host test -f /usr/include/python3.12/Python.h || fail "python3.12-dev not installed"
timed site-2 "${site[@]}" --diff  # --diff: a change shows what changed
[[ "$(changed_count site-2)" == 0 ]] || { grep -B3 -A40 'changed:' "$log/site-2.log" | head -120; fail "site-2 is not idempotent"; }
grep -qE "JIT check passed (as uid|before with the same inputs)" "$log/site-2.log" || fail "site-2: the JIT check did not run"
grep -oE "JIT check passed (as uid|before)[^\"]*" "$log/site-2.log" | head -1
# What a sweep runs per config: the version gate (the JIT check cached) and the service.
timed reconfigure "${play[@]}" playbooks/reconfigure.yml
grep -q "JIT check passed before with the same inputs (cached" "$log/reconfigure.log" || fail "reconfigure: the JIT check was not cached"
# A cached check ends within the start's own round trip: no async job, no poll.
[[ "$(task_outcome reconfigure "Go on waiting for the compile")" == skipping ]] \
    || fail "reconfigure: the cached JIT check went on as an async job"
cuda_home=$(in_host sh -c '. /etc/sglang-deploy/cuda-toolkit.env && echo $CUDA_HOME')
in_host mv "$cuda_home/include/curand_kernel.h" /root/curand_kernel.h.moved
# With no wait in the start's round trip the compile goes on in systemd and the async job attaches to that run:
# its failure still names the compiler's error.
refused jit-without-curand "curand_kernel.h: No such file or directory" "${play[@]}" playbooks/reconfigure.yml \
    -e preflight_jit_sync_wait_s=0
[[ "$(task_outcome jit-without-curand "Go on waiting for the compile")" == ok ]] \
    || fail "jit-without-curand: the JIT check did not go on as an async job"
in_host mv /root/curand_kernel.h.moved "$cuda_home/include/curand_kernel.h"

# --- 2. the apt methods against a local signed repository
repo="$log/repo"
repo_url="http://127.0.0.1:$repo_port/"
keyring_sha256=$(tests/install/aptrepo/build-repo.sh "$repo" "$repo_url" 2>"$log/build-repo.log" | tail -1)
"${PYTHON:-.venv/bin/python}" -m http.server "$repo_port" --bind 127.0.0.1 --directory "$repo" >"$log/repo-http.log" 2>&1 &
repo_pid=$!
for _ in $(seq 50); do curl -fs "${repo_url}InRelease" >/dev/null && break; sleep 0.2; done
export REPO_URL="$repo_url" KEYRING_SHA256="$keyring_sha256"
KEYRING_SHA256=$(printf '0%.0s' {1..64}) refused apt-wrong-keyring "checksum" "${play[@]}" "$here/apt.yml"
timed apt-1 "${play[@]}" "$here/apt.yml"
timed apt-2 "${play[@]}" "$here/apt.yml"
[[ "$(changed_count apt-2)" == 0 ]] || { grep -B3 'changed:' "$log/apt-2.log" | head -30; fail "apt-2 is not idempotent"; }
in_host dpkg-query -W -f='${Package} ${Version}\n' cuda-nvcc-13-0 cuda-toolkit-13-0 libcurand-dev-13-0 \
    nvidia-driver-580-open nvidia-compute-utils-580 nvidia-fabricmanager libnvidia-nscq nvlsm | tee "$log/installed.txt"
grep -qx "cuda-nvcc-13-0 13.0.88-1" "$log/installed.txt" || fail "nvcc not at its pin (a decoy 13.0.99-1 is in the index)"
grep -qx "nvidia-compute-utils-580 580.126.20-0ubuntu1" "$log/installed.txt" || fail "driver sub-package not at the pin"
grep -qx "nvidia-fabricmanager 580.126.20-1" "$log/installed.txt" || fail "fabric manager not at the driver's version"
in_host systemctl is-active nvidia-persistenced nvidia-fabricmanager >/dev/null || fail "daemons not active"
in_host pgrep -x nvlsm >/dev/null || fail "nvlsm not running"
in_host systemctl show sglang-k26-ddtree -p After | grep -q nvidia-fabricmanager.service \
    || fail "the service unit is not ordered after fabric manager"
in_host apt-get install -y -qq --allow-downgrades cuda-nvcc-13-0=13.0.99-1 >/dev/null 2>&1
refused apt-drift "cuda-nvcc-13-0: installed 13.0.99-1, pinned 13.0.88-1" "${play[@]}" "$here/apt.yml"
in_host apt-get install -y -qq --allow-downgrades cuda-nvcc-13-0=13.0.88-1 >/dev/null 2>&1
timed nvswitch-ok "${play[@]}" "$here/nvswitch-check.yml"
in_host apt-get install -y -qq nvidia-fabricmanager=580.159.03-1 nvidia-kernel-common-580=580.159.03-0ubuntu1 >/dev/null 2>&1
in_host systemctl stop nvidia-fabricmanager
refused nvswitch-mismatch "nv-fabricmanager 580.159.03 (must equal the driver version); nvidia-fabricmanager.service inactive (must be active)" \
    "${play[@]}" "$here/nvswitch-check.yml"
in_host apt-get install -y -qq --allow-downgrades nvidia-fabricmanager=580.126.20-1 nvidia-kernel-common-580=580.126.20-0ubuntu1 >/dev/null 2>&1
in_host systemctl start nvidia-fabricmanager
# A GPU that fabric manager has not registered (nvidia-smi -q: Fabric State In Progress).
in_host python3 -c 'import json; p="/etc/fake-nvidia/state.json"; s=json.load(open(p)); s["gpus"][3]["fabric"]={"state": "In Progress", "status": "N/A"}; json.dump(s, open(p, "w"))'
refused nvswitch-fabric "GPU 00000000:1B:00.0: State In Progress, Status N/A (must be State Completed, Status Success)" \
    "${play[@]}" "$here/nvswitch-check.yml"
in_host python3 -c 'import json; p="/etc/fake-nvidia/state.json"; s=json.load(open(p)); s["gpus"][3]["fabric"]={"state": "Completed", "status": "Success"}; json.dump(s, open(p, "w"))'
# Check-only mode: the driver's packages held (an upgrade is refused), a drift from the loaded module refused.
timed hold "${play[@]}" "$here/hold.yml"
in_host apt-mark showhold > "$log/held.txt"
for p in nvidia-compute-utils-580 libnvidia-compute-580 nvidia-fabricmanager libnvidia-nscq; do
    grep -qx "$p" "$log/held.txt" || fail "hold: $p is not held"
done
grep -qx nvlsm "$log/held.txt" && fail "hold: nvlsm (its own numbering) was held"
if in_host apt-get install -y -qq nvidia-compute-utils-580=580.159.03-0ubuntu1 > "$log/held-upgrade.log" 2>&1; then
    fail "hold: apt upgraded a held driver package"
fi
grep -q "held" "$log/held-upgrade.log" || { cat "$log/held-upgrade.log"; fail "hold: apt refused for another reason"; }
in_host sh -c 'echo 580.159.03 > /run/fake-nvidia-module-version'
refused driver-drift "the loaded kernel module is 580.159.03 but libnvidia-compute-580 580.126.20-0ubuntu1" \
    "${play[@]}" "$here/hold.yml" -e _nvidia_driver_module_version_file=/run/fake-nvidia-module-version

# --- 3. the model check as the service user
in_host_stdin python3 - /srv/models < "$here/make_model_fixture.py"
MODEL_DIRS=/srv/models/good,/srv/models/drafter timed model-ok "${play[@]}" "$here/model.yml"
grep -q "(as sglang)" "$log/model-ok.log" || fail "model-ok: not checked as the service user"
MODEL_DIRS=/srv/models/good,/srv/models/broken refused model-broken \
    "model-00002-of-00004.safetensors: missing" "${play[@]}" "$here/model.yml"
for want in "model-00003-of-00004.safetensors: not readable by uid" "model-00004-of-00004.safetensors:" "(truncated)"; do
    tr -s ' \n' ' ' < "$log/model-broken.log" | grep -qF "$want" || fail "model-broken: no '$want'"
done

# --- 4. collect.yml: checksums of the model and drafter files, cached by size+mtime
collect=("${play[@]}" playbooks/collect.yml -e collect_dest="$log/env" -e sglang_service_model_path=/srv/models/good
         -e sglang_service_drafter_path=/srv/models/drafter)
timed collect-1 "${collect[@]}"
timed collect-2 "${collect[@]}"
"${PYTHON:-.venv/bin/python}" - "$log/env/sglang-hostchecks/model-checksums.json" <<'PY' || fail "collect: model checksums"
import json, sys
report = json.load(open(sys.argv[1]))
model = report["dirs"]["/srv/models/good"]
assert model["cached"] == len(model["files"]) and model["hashed"] == 0, model
assert "model-00001-of-00002.safetensors" in model["files"], sorted(model["files"])
print("host-checks: collect: %d model files, %d drafter files, second run hashed none"
      % (len(model["files"]), len(report["dirs"]["/srv/models/drafter"]["files"])))
PY
in_host_stdin sh -c 'cd / && sha256sum -c --quiet -' < "$log/env/sglang-hostchecks/models.sha256" || fail "models.sha256 does not verify on the host"
step "ok ($((SECONDS - t_all)) s)"
