#!/usr/bin/env bash
# Build (or reuse) the systemd test-host image from Debian's mirror.
# No container registry is needed: debootstrap a minimal bookworm with
# systemd and python3, then `podman import` it.
#
# Usage: testhost/build-image.sh [--force]
# Env:   TESTHOST_IMAGE (default localhost/sglang-testhost:bookworm)
#        DEBIAN_MIRROR  (default: debootstrap's default mirror)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"
image="${TESTHOST_IMAGE:-localhost/sglang-testhost:bookworm}"
force=0
[[ "${1:-}" == "--force" ]] && force=1

for tool in podman debootstrap runc; do
    command -v "$tool" >/dev/null || { echo "build-image: '$tool' is not installed (apt-get install podman runc debootstrap)" >&2; exit 2; }
done

if [[ $force -eq 0 ]] && podman image exists "$image"; then
    echo "build-image: reusing $image"
    exit 0
fi

rootfs=$(mktemp -d /var/tmp/sglang-testhost-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "build-image: debootstrap bookworm into $rootfs"
# Packages: systemd as PID 1, python3 for Ansible modules, python3-venv for the
# service venv, curl for manual probing, patch for the patch role, g++ as nvcc's host
# compiler (the CUDA compile check), procps/iproute2 for ss/pgrep.
debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,python3,python3-venv,python3-pip,sudo,patch,g++,procps,iproute2,curl,ca-certificates \
    bookworm "$rootfs" ${DEBIAN_MIRROR:+"$DEBIAN_MIRROR"} >/dev/null
# A fixed machine-id keeps journald happy and the image reproducible.
: > "$rootfs/etc/machine-id"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$image" >/dev/null
echo "build-image: built $image"
