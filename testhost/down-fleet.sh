#!/usr/bin/env bash
# Stop and remove the fleet's test hosts (testhost/up-fleet.sh): every container named
# sglang-fleet-<number>, whatever N started them (the image is kept).
#
# Usage: testhost/down-fleet.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=testhost/common.sh
. "$here/common.sh"
names=$(podman ps -a --format '{{.Names}}' | grep -E '^sglang-fleet-[0-9]+$' || true)
if [[ -z "$names" ]]; then
    echo "down-fleet: no sglang-fleet-N container exists"
    exit 0
fi
for name in $names; do
    "$here/down.sh" "$name"
done
