#!/usr/bin/env bash
# Start (or reuse) the systemd test host container and wait until systemd is up.
# Idempotent: an existing running container is kept, a stopped one is started.
#
# Usage: testhost/up.sh [NAME]        (default NAME: sglang-testhost)
# Env:   TESTHOST_IMAGE (default in testhost/common.sh)
#        TESTHOST_BOOT_TIMEOUT seconds (default 120)
# The container shares the machine's network (--network host): services in it
# listen on this machine's loopback, so pick ports nothing else uses.
#
# GPU stand-ins (testhost/fake-gpu; the host has no GPU): /usr/bin/nvidia-smi
# answers from /etc/fake-nvidia/state.json (8 GPUs; tests edit it to drive the
# GPU refusals), /usr/bin/nvidia-modprobe creates device nodes with the real
# major numbers (195; for nvidia-uvm a dynamic-range major no driver on this
# machine holds). The container's device rules allow those majors, so opening
# a node passes every permission layer and ends in ENXIO (no driver): that is
# what the service's device-node check can prove here, and all it can.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=testhost/common.sh
. "$here/common.sh"
name="${1:-${TESTHOST_NAME:-sglang-testhost}}"
image="$TESTHOST_IMAGE"
timeout="${TESTHOST_BOOT_TIMEOUT:-120}"
# Bumped when the container's creation options change: an older container is recreated.
layout=3

"$here/build-image.sh"

# A character major no driver on this machine registered (the kernel's dynamic range,
# from the top, as it hands them out to drivers such as nvidia-uvm).
uvm_major=""
for major in $(seq 510 -1 384) $(seq 254 -1 234); do
    if ! awk -v m="$major" '/^Character devices:/{c=1;next} /^Block devices:/{c=0} c && $1==m{found=1} END{exit !found}' /proc/devices; then
        uvm_major=$major; break
    fi
done
[[ -n "$uvm_major" ]] || { echo "up: no free character major for the nvidia-uvm stand-in" >&2; exit 1; }
if awk '/^Character devices:/{c=1;next} /^Block devices:/{c=0} c && $1==195{found=1} END{exit !found}' /proc/devices; then
    echo "up: note: major 195 is registered on this machine (an NVIDIA driver?): the stand-in nodes reach it" >&2
fi

if podman container exists "$name" \
        && [[ "$(podman inspect -f '{{ index .Config.Labels "sglang.testhost.layout" }}' "$name")" != "$layout" ]]; then
    echo "up: $name was created with older options; recreating it"
    podman rm -f -t 10 "$name" >/dev/null
fi
if podman container exists "$name" \
        && [[ "$(podman inspect -f '{{ .Image }}' "$name")" != "$(podman image inspect -f '{{ .Id }}' "$image")" ]]; then
    echo "up: $name runs an older $image; recreating it"
    podman rm -f -t 10 "$name" >/dev/null
fi

if podman container exists "$name"; then
    uvm_major=$(podman inspect -f '{{ index .Config.Labels "sglang.testhost.uvm-major" }}' "$name")
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
    # has it; podman's default set does not. CAP_SYS_PTRACE: root reads other
    # users' /proc/PID/fd (ss -p names a port's listener by it), as on a real host.
    podman run -d --name "$name" --hostname "$name" --systemd=always --network host \
        --cap-add SYS_ADMIN --cap-add SYS_PTRACE --label "sglang.testhost.layout=$layout" --label "sglang.testhost.uvm-major=$uvm_major" \
        --device-cgroup-rule "c 195:* rwm" --device-cgroup-rule "c $uvm_major:* rwm" \
        "$image" /sbin/init >/dev/null
fi

install_gpu_stand_ins() {
    podman cp "$here/fake-gpu/nvidia-smi" "$name:/usr/bin/nvidia-smi"
    podman cp "$here/fake-gpu/nvidia-modprobe" "$name:/usr/bin/nvidia-modprobe"
    podman exec "$name" chmod 0755 /usr/bin/nvidia-smi /usr/bin/nvidia-modprobe
    # The state is created once; tests that change it restore it themselves.
    if ! podman exec "$name" test -f /etc/fake-nvidia/state.json; then
        "$here/fake-gpu/state.py" --uvm-major "$uvm_major" \
            | podman exec -i "$name" sh -c 'mkdir -p /etc/fake-nvidia && cat > /etc/fake-nvidia/state.json'
    fi
    echo "up: $name has the GPU stand-ins (8 GPUs, nvidia-uvm major $uvm_major)"
}

# Wait for systemd to finish booting: running, or degraded (some unit failed,
# which the test host tolerates). Anything else after the timeout is an error.
start=$SECONDS
state=""
while (( SECONDS - start < timeout )); do
    state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
    case "$state" in
        running|degraded)
            echo "up: $name systemd is $state after $((SECONDS - start)) s"
            install_gpu_stand_ins
            exit 0 ;;
    esac
    sleep 0.5
done
echo "up: $name systemd did not finish booting within ${timeout} s (state: ${state:-unknown})" >&2
podman exec "$name" systemctl --failed --no-pager >&2 || true
exit 1
