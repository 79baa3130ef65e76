#!/usr/bin/env bash
# End-to-end check of the install roles on a fresh podman systemd container
# (Ubuntu 24.04 test-host image): wheelhouse -> check mode on the bare host ->
# converge -> idempotent re-run -> verify (nvcc 13.0 from the wheels, state
# file == series) -> changed patch re-applied -> empty series restores stock.
#
# Usage: tests/install/run-converge.sh            (KEEP=1 keeps the container)
# Env:   REAL_SERIES=1 also applies patches/sglang/0.5.23 (twice: idempotent),
#        WHEELHOUSE (default /tmp/sglang-deploy-wheelhouse), CONTAINER (default install-dev),
#        TESTHOST_IMAGE (default in testhost/common.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=testhost/common.sh
. "$root/testhost/common.sh"
export WHEELHOUSE="${WHEELHOUSE:-/tmp/sglang-deploy-wheelhouse}"
export ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
container="${CONTAINER:-install-dev}"
image="$TESTHOST_IMAGE"
playbook=(.venv/bin/ansible-playbook -i tests/install/inventory.yml -l "$container" tests/install/converge.yml)
fixtures="$root/tests/install/fixtures"
log=$(mktemp -d /tmp/install-converge.XXXXXX)
echo "run-converge: logs in $log"

step() { echo "run-converge: $*"; }
timed() {  # name command...
    local name=$1; shift
    local t0=$SECONDS
    if ! "$@" > "$log/$name.log" 2>&1; then
        tail -40 "$log/$name.log"; step "FAILED: $name"; exit 1
    fi
    step "$name: $((SECONDS - t0)) s"
}
changed_count() { grep -E "^$container +:" "$log/$1.log" | sed -E 's/.*changed=([0-9]+).*/\1/'; }

timed wheelhouse scripts/build-wheelhouse.sh "$WHEELHOUSE"

testhost_remove "$container" 2>/dev/null || true
TESTHOST_IMAGE="$image" testhost/up.sh "$container" >/dev/null
[[ "${KEEP:-0}" == 1 ]] || trap 'testhost_remove "$container" 2>/dev/null || true' EXIT
for _ in $(seq 30); do
    state=$(podman exec "$container" systemctl is-system-running 2>/dev/null || true)
    [[ "$state" == running || "$state" == degraded ]] && break
    sleep 1
done

timed check-fresh "${playbook[@]}" --check --diff
timed converge "${playbook[@]}"
timed idempotence "${playbook[@]}"
[[ "$(changed_count idempotence)" == 0 ]] || { grep -B2 'changed:' "$log/idempotence.log"; step "FAILED: not idempotent"; exit 1; }
timed check-converged "${playbook[@]}" --check --diff
[[ "$(changed_count check-converged)" == 0 ]] || { step "FAILED: check mode reports changes on a converged host"; exit 1; }

# Verify from outside the roles.
podman exec "$container" /opt/cuda-13.0/site-packages/nvidia/cu13/bin/nvcc --version | tee "$log/nvcc.txt" | tail -2
grep -q 'release 13.0, V13.0.88' "$log/nvcc.txt" || { step "FAILED: nvcc is not 13.0.88"; exit 1; }
podman exec "$container" cat /var/lib/sglang-deploy/sglang-patches.state.json > "$log/state.json"
.venv/bin/python - "$log/state.json" "$fixtures/series-0.5.23" <<'PY'
import hashlib, json, pathlib, sys
state = json.loads(pathlib.Path(sys.argv[1]).read_text())
series_dir = pathlib.Path(sys.argv[2])
names = [l.split("#")[0].split()[0] for l in (series_dir / "series").read_text().splitlines() if l.split("#")[0].strip()]
def sha(n):
    text = (series_dir / n).read_text()
    return hashlib.sha256((text if text.endswith("\n") else text + "\n").encode()).hexdigest()
want = [(n, sha(n)) for n in names]
got = [(p["name"], p["sha256"]) for p in state["patches"]]
assert got == want, f"state {got} != series {want}"
print(f"run-converge: state file matches the series ({len(want)} patches)")
PY
podman exec "$container" /opt/sglang/venv/bin/python -c \
    "import sglang.srt.speculative.dflash_utils as m, sys; sys.exit(0) if 'SGLANG_DEPLOY_TEST_SERIES' in open(m.__file__).read() else sys.exit(1)" 2>/dev/null \
    || podman exec "$container" grep -q SGLANG_DEPLOY_TEST_SERIES \
        /opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/speculative/dflash_utils.py

# A changed patch: pristine restored, series re-applied (v2 of patch 0001).
cp -r "$fixtures/series-0.5.23" "$log/series-v2"
sed -i 's/SGLANG_DEPLOY_TEST_SERIES = 1/SGLANG_DEPLOY_TEST_SERIES = 2/' "$log/series-v2/0001-test-marker-dflash-utils.patch"
SERIES_DIR="$log/series-v2" timed reapply "${playbook[@]}"
grep -q 'action reapply' "$log/reapply.log" || { step "FAILED: changed patch not re-applied"; exit 1; }
podman exec "$container" grep -q 'SGLANG_DEPLOY_TEST_SERIES = 2' \
    /opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/speculative/dflash_utils.py

# An empty series: stock sglang again.
mkdir -p "$log/series-empty" && : > "$log/series-empty/series"
SERIES_DIR="$log/series-empty" timed restore "${playbook[@]}"
grep -q 'action restore' "$log/restore.log" || { step "FAILED: empty series did not restore"; exit 1; }
if podman exec "$container" grep -q SGLANG_DEPLOY_TEST_SERIES \
    /opt/sglang/venv/lib/python3.12/site-packages/sglang/srt/speculative/dflash_utils.py; then
    step "FAILED: patched file not restored"; exit 1
fi
# Optional: the project's real series (patches/sglang/0.5.23) on the real wheel.
if [[ "${REAL_SERIES:-0}" == 1 ]]; then
    SERIES_DIR="$root/patches/sglang/0.5.23" timed real-series "${playbook[@]}"
    grep -E "action (apply|reapply)" "$log/real-series.log" | head -1
    SERIES_DIR="$root/patches/sglang/0.5.23" timed real-series-again "${playbook[@]}"
    [[ "$(changed_count real-series-again)" == 0 ]] || { step "FAILED: real series not idempotent"; exit 1; }
fi
step "ok"
