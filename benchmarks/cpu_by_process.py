"""Where a run's CPU goes, by process: the kernel's process accounting, grouped by command.

    .venv/bin/python benchmarks/cpu_by_process.py --record FILE -- make test   (as root; accton from the acct package)
    .venv/bin/python benchmarks/cpu_by_process.py FILE [--top 30] [--json out.json]

``--record`` switches the kernel's accounting on into FILE, runs the command, and switches it off; then (or given
FILE alone) it reads the records (the acct v3 format Linux writes: one 64-byte record per process, written when the
process ends, for the processes of this machine and of its containers alike) and prints the CPU seconds (user +
system) per command name, user id and kind (a process that exec'd, or a fork that did not: Ansible's task
workers), the largest first, then the total. A process still running when accounting stops is not counted, nor is
the kernel's own work, so the total is below what the CPUs were busy. A benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
#: utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AFORK = 0x01  # forked but did not exec
AHZ = 100  # comp_t ticks per second


def comp_t(value: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) as an integer."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 0x7))


@dataclass(frozen=True)
class Proc:
    comm: str
    uid: int
    forked: bool
    cpu_s: float


def records(data: bytes) -> Iterator[Proc]:
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        flag, version, _tty, _exit, uid, _gid, _pid, _ppid, _btime, _etime, utime, stime, *_rest, comm = (
            RECORD.unpack_from(data, offset)
        )
        if version & 0x0F != 3:
            raise SystemExit(f"cpu_by_process: record at byte {offset} is acct version {version & 0x0F}, not 3")
        name = comm.split(b"\0", 1)[0].decode("utf-8", "replace")
        yield Proc(name, uid, bool(flag & AFORK), (comp_t(utime) + comp_t(stime)) / AHZ)


def by_command(procs: list[Proc]) -> list[dict[str, object]]:
    groups: dict[tuple[str, int, bool], list[float]] = defaultdict(list)
    for p in procs:
        groups[(p.comm, p.uid, p.forked)].append(p.cpu_s)
    rows = [{"command": c, "uid": u, "forked": f, "processes": len(v), "cpu_s": round(sum(v), 1)}
            for (c, u, f), v in groups.items()]  # fmt: skip
    return sorted(rows, key=lambda r: -float(r["cpu_s"]))  # type: ignore[arg-type]


def record(path: Path, command: list[str]) -> int:
    path.write_bytes(b"")
    subprocess.run(["accton", str(path)], check=True)
    try:
        return subprocess.run(command, check=False).returncode
    finally:
        subprocess.run(["accton", "off"], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("file", type=Path, nargs="?", help="an accounting file to read")
    p.add_argument("--record", type=Path, help="record into this file while COMMAND runs (after --)")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--json", type=Path)
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = p.parse_args(argv[:split]), argv[split + 1 :]
    if args.record and not command:
        p.error("--record needs the command to run, after --")
    if not args.record and (args.file is None or command):
        p.error("give an accounting FILE to read, or --record FILE -- COMMAND")
    path = args.record or args.file
    rc = record(path, command) if args.record else 0
    procs = list(records(path.read_bytes()))
    rows = by_command(procs)
    print(f"{'CPU s':>9} {'processes':>9}  command (uid; * = a fork that did not exec)")
    for row in rows[: args.top]:
        print(
            f"{row['cpu_s']:>9.1f} {row['processes']:>9}  {row['command']}{'*' if row['forked'] else ''} ({row['uid']})"
        )
    total = sum(p.cpu_s for p in procs)
    print(f"{total:>9.1f} {len(procs):>9}  in all")
    if args.json:
        args.json.write_text(json.dumps({"total_cpu_s": round(total, 1), "processes": len(procs), "rows": rows}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
