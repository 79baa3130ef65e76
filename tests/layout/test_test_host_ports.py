"""The test hosts of `make test` share this machine's network (podman --network host) and run side by side in its
lanes, so no two listeners may want the same port: each host's sshd, each host's service and the bare-host checks'
apt repository; and none may want a port of the kernel's ephemeral range, from which every outgoing connection takes
its source port (a listener there fails now and then with "Address already in use"). Read from where each is set:
the inventories, the scripts' defaults, the Makefile. The rehearsal's
host is left out: it has a network namespace of its own."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def hosts_of(inventory: Path) -> dict[str, dict[str, object]]:
    return yaml.safe_load(inventory.read_text(encoding="utf-8"))["all"]["children"]["sglang_servers"]["hosts"]


def port(value: object) -> int:
    """A port as an inventory writes it: a number, or an env lookup with a default (``default('N', true)``)."""
    if isinstance(value, int):
        return value
    found = re.search(r"default\('(\d+)'", str(value))
    assert found, f"no port in {value!r}"
    return int(found.group(1))


def script_default(path: Path, var: str) -> int:
    found = re.search(rf"{var}:-(\d+)\}}", path.read_text(encoding="utf-8"))
    assert found, f"{path}: no default for {var}"
    return int(found.group(1))


def listeners() -> dict[tuple[str, str], set[int]]:
    """(host, what) -> the ports every place that sets it names (one listener may be set in two places)."""
    found: dict[tuple[str, str], set[int]] = {}

    def add(host: str, what: str, value: int) -> None:
        found.setdefault((host, what), set()).add(value)

    local = yaml.safe_load((ROOT / "inventory/local/host_vars/sglang-testhost/main.yml").read_text(encoding="utf-8"))
    add("sglang-testhost", "sshd", port(local["ansible_port"]))
    testhost = subprocess.run(["make", "-n", "--no-print-directory", "-o", "image", "testhost"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    made = re.search(r"TESTHOST_SSH_PORT=(\d+)", testhost)
    assert made, testhost
    add("sglang-testhost", "sshd", int(made.group(1)))
    service = yaml.safe_load((ROOT / "inventory/local/group_vars/all/service.yml").read_text(encoding="utf-8"))
    add("sglang-testhost", "service", port(service["sglang_service_port"]))

    molecule = yaml.safe_load((ROOT / "molecule/default/host_vars/sglang-molecule/main.yml").read_text("utf-8"))
    add("sglang-molecule", "sshd", port(molecule["ansible_port"]))
    add("sglang-molecule", "service", port(molecule["sglang_service_port"]))

    for name, host in hosts_of(ROOT / "tests/fleet/inventory/hosts.yml").items():
        add(name, "sshd", port(host["ansible_port"]))
        add(name, "service", port(host["sglang_service_port"]))

    checks = ROOT / "tests/install"
    bare = hosts_of(checks / "hostchecks/hosts.yml")["sglang-hostchecks"]
    add("sglang-hostchecks", "sshd", port(bare["ansible_port"]))
    add("sglang-hostchecks", "sshd", script_default(checks / "run-host-checks.sh", "HOSTCHECKS_SSH_PORT"))
    own = yaml.safe_load((checks / "hostchecks/host_vars/sglang-hostchecks.yml").read_text(encoding="utf-8"))
    add("sglang-hostchecks", "service", port(own["sglang_service_port"]))
    add("sglang-hostchecks", "apt repository", script_default(checks / "run-host-checks.sh", "REPO_PORT"))
    return found


def test_each_listener_is_set_to_one_port_wherever_it_is_set() -> None:
    split = {key: sorted(ports) for key, ports in listeners().items() if len(ports) != 1}
    assert not split, split


def test_no_two_listeners_of_the_test_hosts_want_the_same_port() -> None:
    owners: dict[int, list[str]] = {}
    for (host, what), ports in listeners().items():
        for number in ports:
            owners.setdefault(number, []).append(f"{host} {what}")
    shared = {number: names for number, names in owners.items() if len(names) > 1}
    assert not shared, shared
    # sshd and service of sglang-testhost, molecule's and the fleet's two; the bare host's sshd, service and apt
    # repository
    assert len(owners) == 11, sorted(owners)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="utf-8").split()
    except (OSError, ValueError):
        return 32768, 60999
    return int(low), int(high)


def test_no_listener_of_the_test_hosts_wants_a_port_outgoing_connections_take() -> None:
    low, high = ephemeral_range()
    inside = {f"{host} {what}": sorted(p for p in ports if low <= p <= high or 32768 <= p <= 60999)
              for (host, what), ports in listeners().items()}  # fmt: skip
    taken = {k: v for k, v in inside.items() if v}
    assert not taken, f"in the ephemeral range {low}-{high} (or Linux's default, 32768-60999): {taken}"
