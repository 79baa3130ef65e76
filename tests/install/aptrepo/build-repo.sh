#!/usr/bin/env bash
# Build a LOCAL, signed, flat apt repository laid out like NVIDIA's CUDA
# repository (URIs: <base>/, Suites: /), carrying TEST DUMMY packages with the
# exact names and versions the roles pin, so that cuda_toolkit's apt method and
# nvidia_driver run for real against it: keyring package (checksum), deb822
# source with Signed-By, apt preferences pins, installed-version asserts,
# systemd units of the daemons. Newer decoy versions of the pinned packages are
# in the index too: without the pins apt would install those.
#
# The dummies hold no NVIDIA software: nvcc is a script that prints the 13.0.88
# banner, daemons are shell loops, headers and libraries are empty files. They
# prove the package handling, not CUDA.
#
# Usage: tests/install/aptrepo/build-repo.sh OUT_DIR BASE_URL
#   prints the keyring package's sha256 on the last line.
# Needs: dpkg-deb, dpkg-scanpackages (dpkg-dev), gpg (gnupg).
set -euo pipefail

out=${1:?usage: build-repo.sh OUT_DIR BASE_URL}
base=${2:?usage: build-repo.sh OUT_DIR BASE_URL}
for tool in dpkg-deb dpkg-scanpackages gpg; do
    command -v "$tool" >/dev/null || { echo "build-repo: $tool is not installed (apt-get install dpkg-dev gnupg)" >&2; exit 2; }
done
rm -rf "$out" && mkdir -p "$out/pool"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GNUPGHOME="$work/gnupg"
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "sglang-deploy test repository <test-repo@localhost>" ed25519 sign never
gpg --batch --quiet --export > "$work/cuda-archive-keyring.gpg"

# pkg NAME VERSION ARCH DEPENDS [PATH=CONTENT ...]; CONTENT '@x:TEXT' makes an executable.
pkg() {
    local name=$1 version=$2 arch=$3 depends=$4; shift 4
    local root="$work/build/${name}_${version}"
    mkdir -p "$root/DEBIAN"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: sglang-deploy tests <test-repo@localhost>"
        [[ -n "$depends" ]] && echo "Depends: $depends"
        echo "Description: TEST DUMMY of $name $version (no NVIDIA software)"
    } > "$root/DEBIAN/control"
    local spec path content
    for spec in "$@"; do
        path=${spec%%=*} content=${spec#*=}
        mkdir -p "$root$(dirname "$path")"
        if [[ "$content" == @x:* ]]; then
            printf '%s\n' "${content#@x:}" > "$root$path"; chmod 0755 "$root$path"
        elif [[ "$content" == @file:* ]]; then
            cp "${content#@file:}" "$root$path"; chmod 0644 "$root$path"
        else
            printf '%s\n' "$content" > "$root$path"; chmod 0644 "$root$path"
        fi
    done
    dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/pool/${name}_${version}_${arch}.deb" >/dev/null
}
loop='#!/bin/sh
# TEST DUMMY daemon
while :; do sleep 3600; done'
nvcc_banner() {  # a script printing nvcc's banner for release $1
    printf '@x:#!/bin/sh\n# TEST DUMMY nvcc\necho "nvcc: NVIDIA (R) Cuda compiler driver"\necho "Cuda compilation tools, release 13.0, %s"\necho "Build cuda_13.0.r13.0/compiler.0"' "$1"
}
c=/usr/local/cuda-13.0
unit() {  # a systemd unit running $2
    printf '[Unit]\nDescription=TEST DUMMY %s\n\n[Service]\nExecStart=%s\n\n[Install]\nWantedBy=multi-user.target' "$1" "$2"
}

# --- the keyring package: the repository key and the one-line source it drops
pkg cuda-keyring 1.1-1 all "" \
    "/usr/share/keyrings/cuda-archive-keyring.gpg=@file:$work/cuda-archive-keyring.gpg" \
    "/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list=deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] $base /"

# --- CUDA 13.0.3 toolkit (names and versions of cuda_toolkit_apt_pins)
pkg cuda-toolkit-13-0 13.0.3-1 amd64 "cuda-nvcc-13-0 (>= 13.0.88), cuda-crt-13-0 (>= 13.0.88), cuda-nvvm-13-0 (>= 13.0.88), cuda-cudart-dev-13-0 (>= 13.0.96), cuda-cccl-13-0 (>= 13.0.85), cuda-nvrtc-dev-13-0 (>= 13.0.88), cuda-driver-dev-13-0 (>= 13.0.96), libcurand-dev-13-0 (>= 10.4.0.35)"
pkg cuda-nvcc-13-0 13.0.88-1 amd64 "" "$c/bin/nvcc=$(nvcc_banner V13.0.88)"
pkg cuda-nvcc-13-0 13.0.99-1 amd64 "" "$c/bin/nvcc=$(nvcc_banner V13.0.99)"  # decoy: newer than the pin
pkg cuda-crt-13-0 13.0.88-1 amd64 "" "$c/include/crt/host_config.h=/* TEST DUMMY */"
pkg cuda-nvvm-13-0 13.0.88-1 amd64 "" "$c/nvvm/bin/cicc=@x:#!/bin/sh"
pkg cuda-cudart-13-0 13.0.96-1 amd64 "" "$c/lib64/libcudart.so.13=TEST DUMMY"
pkg cuda-cudart-dev-13-0 13.0.96-1 amd64 "cuda-cudart-13-0 (>= 13.0.96)" "$c/include/cuda_runtime.h=/* TEST DUMMY */" \
    "$c/lib64/libcudart.so=TEST DUMMY"
pkg cuda-cccl-13-0 13.0.85-1 amd64 "" "$c/include/cccl/cub/cub.cuh=/* TEST DUMMY */" \
    "$c/include/cccl/thrust/version.h=/* TEST DUMMY */" "$c/include/cccl/cuda/std/atomic=/* TEST DUMMY */"
pkg cuda-nvrtc-13-0 13.0.88-1 amd64 "" "$c/lib64/libnvrtc.so.13=TEST DUMMY"
pkg cuda-nvrtc-dev-13-0 13.0.88-1 amd64 "cuda-nvrtc-13-0 (>= 13.0.88)" "$c/include/nvrtc.h=/* TEST DUMMY */"
pkg cuda-driver-dev-13-0 13.0.96-1 amd64 "" "$c/lib64/stubs/libcuda.so=TEST DUMMY"
pkg libcurand-13-0 10.4.0.35-1 amd64 "" "$c/lib64/libcurand.so.10=TEST DUMMY"
pkg libcurand-dev-13-0 10.4.0.35-1 amd64 "libcurand-13-0 (>= 10.4.0.35)" "$c/include/curand_kernel.h=/* TEST DUMMY */"

# --- R580 driver 580.126.20 (the pin) and 580.159.03 (decoys), fabric manager, NVLSM
for v in 580.126.20 580.159.03; do
    pkg nvidia-driver-580-open "$v-0ubuntu1" amd64 \
        "nvidia-compute-utils-580 (>= $v), libnvidia-compute-580 (>= $v), nvidia-utils-580 (>= $v), nvidia-kernel-common-580 (>= $v)"
    pkg nvidia-compute-utils-580 "$v-0ubuntu1" amd64 "" "/usr/bin/nvidia-persistenced=@x:$loop" \
        "/usr/lib/systemd/system/nvidia-persistenced.service=$(unit 'NVIDIA persistence daemon' /usr/bin/nvidia-persistenced)"
    pkg libnvidia-compute-580 "$v-0ubuntu1" amd64 "" "/usr/share/doc/libnvidia-compute-580/TEST-DUMMY=$v"
    pkg nvidia-utils-580 "$v-0ubuntu1" amd64 "" "/usr/share/doc/nvidia-utils-580/TEST-DUMMY=$v"
    pkg nvidia-kernel-common-580 "$v-0ubuntu1" amd64 "" "/usr/share/doc/nvidia-kernel-common-580/TEST-DUMMY=$v"
    # R580's fabric manager and NSCQ as NVIDIA's CUDA repository names them (no branch in the name);
    # the dummy answers --version as nv-fabricmanager does and starts NVLSM on Blackwell NVSwitch systems.
    pkg nvidia-fabricmanager "$v-1" amd64 "nvidia-kernel-common-580 (>= $v)" \
        "/usr/bin/nv-fabricmanager=@x:#!/bin/sh
# TEST DUMMY fabric manager $v
case \"\$1\" in --version|-v) echo \"Fabric Manager version is : $v\"; exit 0 ;; esac
[ -x /opt/nvidia/nvlsm/sbin/nvlsm ] && /opt/nvidia/nvlsm/sbin/nvlsm &
while :; do sleep 3600; done" \
        "/usr/lib/systemd/system/nvidia-fabricmanager.service=$(unit 'NVIDIA fabric manager' /usr/bin/nv-fabricmanager)"
    pkg libnvidia-nscq "$v-1" amd64 "" "/usr/share/doc/libnvidia-nscq/TEST-DUMMY=$v"
done
pkg nvlsm 2025.06.6-1 amd64 "" "/opt/nvidia/nvlsm/sbin/nvlsm=@x:$loop"

# --- the flat index, Release, InRelease and Release.gpg signed with the test key
mv "$out/pool/cuda-keyring_1.1-1_all.deb" "$out/cuda-keyring_1.1-1_all.deb"
(cd "$out" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages && gzip -9kn Packages)
{
    echo "Origin: sglang-deploy tests"
    echo "Label: TEST DUMMY CUDA repository"
    echo "Architectures: amd64 all"
    echo "Date: $(LC_ALL=C date -u '+%a, %d %b %Y %H:%M:%S UTC')"
    echo "SHA256:"
    for f in Packages Packages.gz; do
        printf ' %s %s %s\n' "$(sha256sum "$out/$f" | cut -d' ' -f1)" "$(stat -c %s "$out/$f")" "$f"
    done
} > "$out/Release"
gpg --batch --quiet --yes --clearsign -o "$out/InRelease" "$out/Release"
gpg --batch --quiet --yes -abs -o "$out/Release.gpg" "$out/Release"
echo "build-repo: $(ls "$out"/pool/*.deb | wc -l) packages + keyring in $out ($base)" >&2
sha256sum "$out/cuda-keyring_1.1-1_all.deb" | cut -d' ' -f1
