"""Every adversarial probe of the coding sandbox in every isolation mode: held or fooled, as a table.

    python benchmarks/sandbox_probes.py [--modes bwrap,namespaces,none]

The probes are ``tests/codeeval/probes.py`` (the table ``tests/codeeval/test_probes.py`` asserts).
A probe is run even where its mode does not promise it (mode ``none`` has no private file system
or pid namespace): the table shows what each mode really holds here, as this user. It also prints
the median wall time of a trivial candidate per mode (10 runs). Run it as a user other than root
(e.g. ``setpriv --reuid=65534 ...`` with a Python that user can read) to see the non-root modes:
user namespaces instead of a fresh uid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from repro_py.codeeval.sandbox import SandboxLimits, run_candidate  # noqa: E402
from tests.codeeval.probes import PROBES, probe_context, promised  # noqa: E402


def run_mode(mode: str) -> dict[str, tuple[bool, str]]:
    """probe id -> (held, outcome)."""
    out: dict[str, tuple[bool, str]] = {}
    os.environ["REPRO_JUDGE_SECRET"] = "not for the candidate"
    for probe in PROBES:
        with tempfile.TemporaryDirectory() as tmp, probe_context(Path(tmp)) as ctx:
            result = run_candidate(probe.code(ctx), probe.tests(ctx), isolation=mode,
                                   limits=SandboxLimits(**probe.limits))  # type: ignore[arg-type]
            out[probe.id] = (probe.held(result, ctx), result.outcome)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", default="bwrap,namespaces,none")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    usable: list[str] = []
    for mode in modes:
        probe = run_candidate("def f():\n    return 1\n", "assert f() == 1\n", isolation=mode)
        if probe.outcome == "passed":
            usable.append(mode)
        else:
            print(f"mode {mode} does not work here: {probe.detail} {probe.stderr_tail.strip()[-200:]}")
    print(f"uid {os.geteuid()}, {len(PROBES)} probes ({sum(p.new for p in PROBES)} builtin-shadowing ones new)")
    for mode in usable:
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            run_candidate("def f():\n    return 1\n", "assert f() == 1\n", isolation=mode)
            times.append(time.perf_counter() - t0)
        print(f"mode {mode}: trivial candidate, median wall {statistics.median(times) * 1000:.0f} ms (10 runs)")
    table = {mode: run_mode(mode) for mode in usable}
    print(f"\n{'probe':28} " + " ".join(f"{m:>16}" for m in usable))
    for probe in PROBES:
        cells = []
        for mode in usable:
            held, _ = table[mode][probe.id]
            mark = "held" if held else ("FOOLED" if promised(probe, mode) else "not held*")
            cells.append(f"{mark:>16}")
        print(f"{probe.id:28} " + " ".join(cells))
    for mode in usable:
        held = sum(1 for h, _ in table[mode].values() if h)
        owed = [p.id for p in PROBES if promised(p, mode) and not table[mode][p.id][0]]
        print(f"mode {mode}: {held} of {len(PROBES)} held; promised but fooled: {owed or 'none'}")
    print("* not promised by the mode (no private file system or pid namespace); the gates refuse that mode "
          "unless --allow-unisolated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
