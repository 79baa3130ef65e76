#!/usr/bin/env bash
# Start (or reuse) N systemd test hosts from the one test-host image, for a fleet sweep:
# sglang-fleet-1..N, each with its own systemd (PID 1) and its own sshd on 127.0.0.1:3103<i>
# (31031, 31032, ...), user deploy with the test hosts' shared key (~/.ssh/sglang-testhost/,
# changed under up.sh's lock). Each host is testhost/up.sh NAME with TESTHOST_SSH_PORT set
# (idempotent: a running host is kept, a stopped one started). tests/fleet/inventory names
# the first three (sglang_servers; inventory/local's values, each its own service port,
# since the hosts share this machine's network).
#
# Usage: testhost/up-fleet.sh [N]         (default N: 3; 1..9)
# Env:   what testhost/up.sh takes (TESTHOST_IMAGE, TESTHOST_BOOT_TIMEOUT, TESTHOST_GPU_PROFILE, ...)
# Stop and remove them: testhost/down-fleet.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
count="${1:-3}"
if ! [[ "$count" =~ ^[1-9]$ ]]; then
    echo "up-fleet: N=$count is not a host count this script starts; allowed 1..9 (sshd ports 31031..31039)" >&2
    exit 2
fi
for i in $(seq 1 "$count"); do
    TESTHOST_SSH_PORT=$((31030 + i)) "$here/up.sh" "sglang-fleet-$i"
done
echo "up-fleet: $count host(s) up: sglang-fleet-1..$count on 127.0.0.1:31031..$((31030 + count))"
