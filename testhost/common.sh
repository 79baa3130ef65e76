# Sourced by the test-host scripts: the one place that names the image.
# The test host is Ubuntu 24.04 (noble: systemd 255, Python 3.12), the
# production hosts' release, built from Ubuntu's archive with debootstrap.
# shellcheck shell=bash
: "${TESTHOST_IMAGE:=localhost/sglang-testhost:ubuntu-24.04}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/containers.conf}"
