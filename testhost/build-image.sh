#!/usr/bin/env bash
# Build (or reuse) the systemd test-host image: Ubuntu 24.04 (noble), the
# release the production GPU hosts run (systemd 255, Python 3.12), from
# Ubuntu's archive with debootstrap. No container registry is needed.
#
# Reproducible: packages come from noble's release pocket (frozen since the
# release; no -updates), verified with the Ubuntu archive keyring whose .deb
# is pinned by sha256 below; the machine-id is empty and the tar is
# numeric-owner.
#
# Usage: testhost/build-image.sh [--force]
# Env:   TESTHOST_IMAGE (default in testhost/common.sh)
#        UBUNTU_MIRROR  (default http://archive.ubuntu.com/ubuntu)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=testhost/common.sh
. "$here/common.sh"
image="$TESTHOST_IMAGE"
mirror="${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}"
suite=noble
keyring_deb="pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
keyring_sha256="36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8"
force=0
[[ "${1:-}" == "--force" ]] && force=1

for tool in podman debootstrap runc curl; do
    command -v "$tool" >/dev/null || { echo "build-image: '$tool' is not installed (apt-get install podman runc debootstrap curl)" >&2; exit 2; }
done

# The image carries the sha256 of this recipe as a label: an image built by an
# older recipe (other packages, another release) is rebuilt, never reused.
recipe=$(sha256sum "$here/build-image.sh" | cut -c1-64)
if [[ $force -eq 0 ]] && podman image exists "$image"; then
    built_by=$(podman image inspect --format '{{ index .Labels "org.sglang-ddtree.recipe" }}' "$image" 2>/dev/null || true)
    if [[ "$built_by" == "$recipe" ]]; then
        echo "build-image: reusing $image (recipe ${recipe:0:12})"
        exit 0
    fi
    echo "build-image: $image was built by another recipe (${built_by:-unlabelled}), rebuilding with ${recipe:0:12}"
fi

work=$(mktemp -d /var/tmp/sglang-testhost.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

echo "build-image: Ubuntu archive keyring ($keyring_deb, sha256 pinned)"
curl -fsSL --retry 3 -o "$work/keyring.deb" "$mirror/$keyring_deb"
echo "$keyring_sha256  $work/keyring.deb" | sha256sum --quiet -c - \
    || { echo "build-image: $keyring_deb does not have the pinned sha256" >&2; exit 1; }
dpkg-deb -x "$work/keyring.deb" "$work/keyring"

# Debian's debootstrap has no 'noble' script; noble bootstraps with the same
# script as every Ubuntu release since gutsy (Ubuntu's own debootstrap links it).
script=/usr/share/debootstrap/scripts/gutsy
[[ -f /usr/share/debootstrap/scripts/$suite ]] && script=/usr/share/debootstrap/scripts/$suite

echo "build-image: debootstrap $suite from $mirror"
# Packages: systemd as PID 1, openssh-server (Ansible reaches the test host over
# SSH as it reaches a real one; testhost/up.sh enables it on a loopback port),
# python3 (3.12) for Ansible modules, curl for probing,
# patch for the patch role, procps/iproute2 for ss/pgrep, kmod/udev as on a real
# host. No compiler, no Python headers, no python3-venv: like a bare Ubuntu 24.04
# server; the roles install them (cuda_toolkit: build-essential, python3-venv;
# python_env: python3.12-dev, python3.12-venv).
debootstrap --variant=minbase --keyring="$work/keyring/usr/share/keyrings/ubuntu-archive-keyring.gpg" \
    --components=main,universe \
    --include=systemd,systemd-sysv,dbus,udev,kmod,openssh-server,python3,sudo,patch,procps,iproute2,curl,ca-certificates \
    "$suite" "$rootfs" "$mirror" "$script" >"$work/debootstrap.log" 2>&1 \
    || { tail -30 "$work/debootstrap.log" >&2; echo "build-image: debootstrap failed" >&2; exit 1; }
# apt inside the container: the same release pocket, nothing else.
echo "deb $mirror $suite main universe" > "$rootfs/etc/apt/sources.list"
# sshd stays off until testhost/up.sh configures it: with the host network a
# container's sshd on 0.0.0.0:22 would be reachable from outside this machine.
chroot "$rootfs" systemctl disable ssh.socket ssh.service >/dev/null 2>&1 || true
rm -f "$rootfs"/etc/ssh/ssh_host_*  # generated per container by testhost/up.sh
# A fixed (empty) machine-id: systemd generates one at boot; the image stays reproducible.
: > "$rootfs/etc/machine-id"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL org.sglang-ddtree.recipe=$recipe" - "$image" >/dev/null
echo "build-image: built $image ($(chroot "$rootfs" systemctl --version | head -1), $(chroot "$rootfs" python3 --version))"
