#!/usr/bin/env bash
# Stop and remove the systemd test host container (the image is kept).
# Usage: testhost/down.sh [NAME]      (default NAME: sglang-testhost)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=testhost/common.sh
. "$here/common.sh"
name="${1:-${TESTHOST_NAME:-sglang-testhost}}"

if podman container exists "$name"; then
    testhost_remove "$name"
    echo "down: removed $name"
else
    echo "down: $name does not exist"
fi
