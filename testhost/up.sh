#!/usr/bin/env bash
# Start (or reuse) the systemd test host container and wait until systemd is up.
# Idempotent: an existing running container is kept, a stopped one is started.
#
# Usage: testhost/up.sh [NAME]        (default NAME: sglang-testhost)
# Env:   TESTHOST_IMAGE (default in testhost/common.sh)
#        TESTHOST_BOOT_TIMEOUT seconds (default 120)
# The container shares the machine's network (--network host): services in it
# listen on this machine's loopback, so pick ports nothing else uses.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=testhost/common.sh
. "$here/common.sh"
name="${1:-${TESTHOST_NAME:-sglang-testhost}}"
image="$TESTHOST_IMAGE"
timeout="${TESTHOST_BOOT_TIMEOUT:-120}"

"$here/build-image.sh"

if podman container exists "$name"; then
    if [[ "$(podman inspect -f '{{.State.Running}}' "$name")" != "true" ]]; then
        echo "up: starting the existing container $name"
        podman start "$name" >/dev/null
    else
        echo "up: $name is already running"
    fi
else
    echo "up: creating $name from $image"
    # CAP_SYS_ADMIN: systemd 255 keeps it across User= to set up a unit's
    # sandbox (PrivateTmp, ProtectSystem...); without it every hardened unit
    # fails with 217/USER "Failed to keep CAP_SYS_ADMIN". PID 1 on a real host
    # has it; podman's default set does not.
    podman run -d --name "$name" --hostname "$name" --systemd=always --network host \
        --cap-add SYS_ADMIN "$image" /sbin/init >/dev/null
fi

# Wait for systemd to finish booting: running, or degraded (some unit failed,
# which the test host tolerates). Anything else after the timeout is an error.
start=$SECONDS
state=""
while (( SECONDS - start < timeout )); do
    state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
    case "$state" in
        running|degraded) echo "up: $name systemd is $state after $((SECONDS - start)) s"; exit 0 ;;
    esac
    sleep 0.5
done
echo "up: $name systemd did not finish booting within ${timeout} s (state: ${state:-unknown})" >&2
podman exec "$name" systemctl --failed --no-pager >&2 || true
exit 1
