# Sourced by the test-host scripts: the one place that names the image.
# The test host is Ubuntu 24.04 (noble: systemd 255, Python 3.12), the
# production hosts' release, built from Ubuntu's archive with debootstrap.
# shellcheck shell=bash
: "${TESTHOST_IMAGE:=localhost/sglang-testhost:ubuntu-24.04}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/containers.conf}"

# testhost_remove NAME [STOP_TIMEOUT]: remove a container, including one podman
# records as running whose processes were killed behind its back (conmon and init
# killed when a CI runner's session ends): rm -f fails on that one ("container state
# improper"), a stop first moves it to stopping, and rm -f then removes it.
testhost_remove() {
    local name=$1 timeout=${2:-10}
    podman rm -f -t "$timeout" "$name" >/dev/null 2>&1 && return 0
    podman stop -t 0 "$name" >/dev/null 2>&1 || true
    podman rm -f -t 0 "$name" >/dev/null
}
