"""What one Ansible module run costs on a test host, and how much of it is compiling the payload.

Every task that runs a module on a host sends it an AnsiballZ payload: the module and the
module_utils it imports, zipped, which Python's ``zipimport`` loads from their sources on every
run (it keeps no bytecode), and in Python 3.12 compiles each of them twice (``find_spec`` asks
the importer for the file name, which ``zipimport`` answers by compiling the module, then
``exec_module`` compiles it again). ``make test`` starts some 3,300 Python processes on its test
hosts, most of them module runs, so that compile is one of its largest single costs (docs/testing.md).

This builds real payloads with this checkout's ansible-core (``ansible.builtin.stat`` and
``ansible.builtin.command``, kept with ``ANSIBLE_KEEP_REMOTE_FILES``), then, in a container of the
test-host image (Ubuntu 24.04's python3.12, nothing of the project installed), prints per module
the median CPU seconds of:

    payload     the payload run as Ansible runs it (ansible-core's wrapper, the zip imported)
    exploded    the same module run from the payload unpacked into a directory (the wrapper's own
                ``explode`` and ``execute``), where Python keeps its bytecode between runs
    bare        an interpreter that imports nothing

and how many times ``zipimport`` compiled a module per module it loaded from the payload. No
test host, no setting of ansible-core, and nothing the bundle deploys is changed: the figures say
what a module run costs on these hosts' Python, not how to change it. Usage::

    python benchmarks/module_payload_cost.py [--runs 15] [--image localhost/sglang-testhost:ubuntu-24.04]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_IMAGE = "localhost/sglang-testhost:ubuntu-24.04"
MODULES = {"stat": "path=/etc/hostname", "command": "true"}

# Runs in the container with the host's python3: the CPU time of each way of running each payload.
PROBE = r"""
import cProfile, contextlib, io, json, pstats, resource, runpy, statistics, subprocess, sys


def cpu(cmd, cwd, runs):
    times = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times)


def compiles(wrapper):
    # the payload run in this process under the profiler: zipimport's compiles, and the modules it loaded
    profile = cProfile.Profile()
    sys.argv = [wrapper]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            profile.runcall(runpy.run_path, wrapper, run_name="__main__")
        except SystemExit:
            pass
    calls = sum(stat[1] for (path, _, func), stat in pstats.Stats(profile).stats.items()
                if func == "_compile_source" and "zipimport" in path)
    loaded = sum(1 for m in list(sys.modules.values())
                 if "_payload.zip" in str(getattr(getattr(m, "__spec__", None), "origin", "")))
    print(json.dumps([calls, loaded]))


def measure(runs, names):
    out = {"python": sys.version.split()[0], "bare": cpu([sys.executable, "-c", "pass"], "/", runs)}
    for name in names:
        work = f"/work/{name}"
        subprocess.run(["cp", "-r", f"/payloads/{name}", work], check=True)
        wrapper = f"{work}/AnsiballZ_{name}.py"
        subprocess.run([sys.executable, wrapper, "explode"], cwd=work, stdout=subprocess.DEVNULL, check=True)
        row = {"payload": cpu([sys.executable, wrapper], work, runs),
               "exploded": cpu([sys.executable, wrapper, "execute"], work, runs)}
        found = subprocess.run([sys.executable, "/probe.py", "compiles", wrapper], cwd=work, capture_output=True,
                               text=True, check=True)
        row["compiles"], row["modules"] = json.loads(found.stdout.strip().splitlines()[-1])
        out[name] = row
    print(json.dumps(out))


if sys.argv[1] == "compiles":
    compiles(sys.argv[2])
else:
    measure(int(sys.argv[2]), sys.argv[3:])
"""


def build_payload(name: str, args: str, dest: Path) -> None:
    """ansible-core's own payload of ``ansible.builtin.<name>``, as it sends it to a host (kept by
    ANSIBLE_KEEP_REMOTE_FILES from a run on this machine)."""
    keep = dest / "keep"
    env = {
        **os.environ, "ANSIBLE_KEEP_REMOTE_FILES": "1", "ANSIBLE_REMOTE_TMP": str(keep), "ANSIBLE_PIPELINING": "0",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
    }  # fmt: skip
    ansible = Path(sys.executable).with_name("ansible")
    subprocess.run(
        [str(ansible), "localhost", "-c", "local", "-i", "localhost,", "-m", f"ansible.builtin.{name}", "-a", args,
         "-e", f"ansible_python_interpreter={sys.executable}"],
        env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    (wrapper,) = keep.glob(f"*/AnsiballZ_{name}.py")
    target = dest / "payloads" / name
    target.mkdir(parents=True)
    shutil.copy(wrapper, target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="runs of each, the median printed (default 15)")
    ap.add_argument("--image", default=DEFAULT_IMAGE, help=f"the test-host image (default {DEFAULT_IMAGE})")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: at least 1")
    env = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF", str(ROOT / "testhost/containers.conf"))}
    if subprocess.run(["podman", "image", "exists", args.image], env=env, check=False).returncode != 0:
        print(f"module_payload_cost: image {args.image} not found; build it with `make image`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="module-payload-") as tmp:
        root = Path(tmp)
        for name, module_args in MODULES.items():
            build_payload(name, module_args, root)
        (root / "probe.py").write_text(PROBE, encoding="utf-8")
        proc = subprocess.run(
            ["podman", "run", "--rm", "-v", f"{root / 'payloads'}:/payloads:ro,Z",
             "-v", f"{root / 'probe.py'}:/probe.py:ro,Z", "--tmpfs", "/work",
             args.image, "python3", "/probe.py", "measure", str(args.runs), *MODULES],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
    if proc.returncode != 0:
        print(f"module_payload_cost: the probe failed in {args.image}:\n{proc.stderr[-3000:]}", file=sys.stderr)
        return 1
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{args.image}, python {res['python']}; median CPU seconds of {args.runs} runs each")
    print("| module | payload (as Ansible runs it) | exploded (bytecode kept) | saved by the kept bytecode | "
          "zipimport compiles per module loaded |")
    print("|---|---:|---:|---:|---:|")
    for name in MODULES:
        row = res[name]
        # of what the module run costs beyond a bare interpreter
        share = 1 - (row["exploded"] - res["bare"]) / (row["payload"] - res["bare"])
        per = row["compiles"] / max(1, row["modules"])
        print(f"| {name} | {row['payload']:.3f} | {row['exploded']:.3f} | {share:.0%} | "
              f"{per:.1f} ({row['compiles']} for {row['modules']}) |")
    print(f"| (an interpreter that imports nothing) | {res['bare']:.3f} | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
