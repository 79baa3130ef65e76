#!/usr/bin/env bash
# Start (or reuse) the systemd test host container and wait until systemd is up.
# Idempotent: an existing running container is kept, a stopped one is started.
#
# Usage: testhost/up.sh [NAME]        (default NAME: sglang-testhost)
# Env:   TESTHOST_IMAGE (default in testhost/common.sh)
#        TESTHOST_SSH_PORT  sshd on 127.0.0.1:PORT, user deploy with sudo (the
#                           connection inventory/local and molecule use)
#        TESTHOST_BOOT_TIMEOUT seconds (default 120)
#        TESTHOST_NETWORK   a podman network (with TESTHOST_IP, its address there): the
#                           container gets a network namespace of its own, reached from
#                           this machine at TESTHOST_IP over the network's bridge (not
#                           published: nothing outside the machine reaches it); sshd
#                           then listens on TESTHOST_IP (TESTHOST_SSH_PORT, default 22),
#                           and CAP_NET_ADMIN lets a firewall (ufw) work in that namespace
#        TESTHOST_ADD_HOSTS  extra /etc/hosts entries, "name:address name:address"
#        TESTHOST_GPU_PROFILE  rtx-pro-6000 (default; CT200's GPUs) or b300 (compute
#                           capability 10.3, registered with an NVSwitch fabric)
#        TESTHOST_FABRIC=1  also the NVSwitch host's fabric stand-ins (fabric.sh:
#                           nv-fabricmanager, its service, nvlsm)
# By default the container shares the machine's network (--network host): services in
# it listen on this machine's loopback, so pick ports nothing else uses.
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
network="${TESTHOST_NETWORK:-host}"
gpu_profile="${TESTHOST_GPU_PROFILE:-rtx-pro-6000}"
if [[ "$network" != host ]]; then
    [[ -n "${TESTHOST_IP:-}" ]] || { echo "up: TESTHOST_NETWORK=$network needs TESTHOST_IP (its address there)" >&2; exit 2; }
    # its own namespace: its firewall is its own business, as on a real host (ufw, iptables)
    net_args=(--network "$network" --ip "$TESTHOST_IP" --cap-add NET_ADMIN)
    ssh_address=$TESTHOST_IP
    TESTHOST_SSH_PORT=${TESTHOST_SSH_PORT:-22}
else
    net_args=(--network host)
    ssh_address=127.0.0.1
fi
for entry in ${TESTHOST_ADD_HOSTS:-}; do net_args+=(--add-host "$entry"); done
timeout="${TESTHOST_BOOT_TIMEOUT:-120}"
# Bumped when the container's creation options change: an older container is recreated.
layout=4

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
    testhost_remove "$name"
fi
if podman container exists "$name" \
        && [[ "$(podman inspect -f '{{ .Image }}' "$name")" != "$(podman image inspect -f '{{ .Id }}' "$image")" ]]; then
    echo "up: $name runs an older $image; recreating it"
    testhost_remove "$name"
fi

# A container podman records as running (or stopping) whose processes are gone: conmon and
# its init were killed behind podman's back (a CI runner's session ending, kill -9). Exec
# fails with "cannot exec in a stopped container", stop leaves it "stopping" and start
# refuses it: only a new container works. Its state inside is lost; plays rebuild it.
if podman container exists "$name"; then
    status=$(podman inspect -f '{{.State.Status}}' "$name")
    if [[ "$status" == running || "$status" == stopping ]] && ! podman exec "$name" true >/dev/null 2>&1; then
        echo "up: $name is recorded as $status but its processes are gone (killed outside podman); recreating it"
        testhost_remove "$name" 0
    fi
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
    # --add-host: the hostname resolves, as on a real host (sudo looks it up).
    podman run -d --name "$name" --hostname "$name" --add-host "$name:127.0.1.1" --systemd=always "${net_args[@]}" \
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
        "$here/fake-gpu/state.py" --uvm-major "$uvm_major" --profile "$gpu_profile" \
            | podman exec -i "$name" sh -c 'mkdir -p /etc/fake-nvidia && cat > /etc/fake-nvidia/state.json'
    fi
    echo "up: $name has the GPU stand-ins (8 GPUs, $gpu_profile, nvidia-uvm major $uvm_major)"
    if [[ "${TESTHOST_FABRIC:-0}" == 1 ]]; then
        podman exec -i "$name" sh < "$here/fake-gpu/fabric.sh"
        echo "up: $name has the NVSwitch fabric stand-ins (nv-fabricmanager, nvidia-fabricmanager.service, nvlsm)"
    fi
}

# SSH, as Ansible reaches a real host: sshd on 127.0.0.1:$TESTHOST_SSH_PORT only
# (the container shares this machine's network), user "deploy" with the
# controller's key and password-less sudo (plays become root through sudo).
# The key pair and known_hosts live in ~/.ssh/sglang-testhost/ (the same path
# from any inventory copy or working directory); the host keys are generated per
# container and pinned in known_hosts, so host key checking stays on.
ssh_dir="${TESTHOST_SSH_DIR:-$HOME/.ssh/sglang-testhost}"
enable_ssh() {
    local port=$1
    mkdir -p "$ssh_dir" && chmod 0700 "$ssh_dir" "$(dirname "$ssh_dir")"
    # The key pair and known_hosts are shared by every test host (make test's side lane brings
    # one up beside the main lane's): each change of them holds this lock.
    (
        flock 9
        [[ -f "$ssh_dir/id_ed25519" ]] || ssh-keygen -q -t ed25519 -N '' -C sglang-testhost -f "$ssh_dir/id_ed25519"
    ) 9>"$ssh_dir/.lock"
    podman exec -i "$name" sh -euc '
        port=$1
        id deploy >/dev/null 2>&1 || useradd --create-home --shell /bin/bash deploy
        install -d -m 0700 -o deploy -g deploy /home/deploy/.ssh
        cat > /home/deploy/.ssh/authorized_keys
        chown deploy:deploy /home/deploy/.ssh/authorized_keys && chmod 0600 /home/deploy/.ssh/authorized_keys
        echo "deploy ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/deploy && chmod 0440 /etc/sudoers.d/deploy
        printf "Port %s\nListenAddress %s\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin no\nAllowUsers deploy\n" "$port" "$2" \
            > /etc/ssh/sshd_config.d/10-testhost.conf
        [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A >/dev/null
        systemctl enable --now ssh.service >/dev/null 2>&1
        systemctl restart ssh.service
    ' sh "$port" "$ssh_address" < "$ssh_dir/id_ed25519.pub"
    local hostkey
    hostkey=$(podman exec "$name" cat /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f1-2)
    # known_hosts names a host on port 22 plainly, on any other port as [host]:port
    local known="[$ssh_address]:$port"
    [[ "$port" == 22 ]] && known=$ssh_address
    (
        flock 9
        touch "$ssh_dir/known_hosts"
        awk -v k="$known" '$1 != k' "$ssh_dir/known_hosts" > "$ssh_dir/known_hosts.new"
        echo "$known $hostkey" >> "$ssh_dir/known_hosts.new"
        mv "$ssh_dir/known_hosts.new" "$ssh_dir/known_hosts"
    ) 9>"$ssh_dir/.lock"
    local t=$SECONDS
    until ssh -q -o BatchMode=yes -o UserKnownHostsFile="$ssh_dir/known_hosts" -o StrictHostKeyChecking=yes \
            -i "$ssh_dir/id_ed25519" -p "$port" "deploy@$ssh_address" sudo -n true 2>/dev/null; do
        if (( SECONDS - t > 30 )); then
            echo "up: $name does not answer SSH on $ssh_address:$port as deploy with sudo" >&2
            podman exec "$name" journalctl -u ssh.service --no-pager -n 20 >&2 || true
            return 1
        fi
        sleep 0.5
    done
    echo "up: $name answers SSH on $ssh_address:$port (user deploy, sudo)"
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
            if [[ -n "${TESTHOST_SSH_PORT:-}" ]]; then enable_ssh "$TESTHOST_SSH_PORT" || exit 1; fi
            exit 0 ;;
    esac
    sleep 0.5
done
echo "up: $name systemd did not finish booting within ${timeout} s (state: ${state:-unknown})" >&2
podman exec "$name" systemctl --failed --no-pager >&2 || true
exit 1
