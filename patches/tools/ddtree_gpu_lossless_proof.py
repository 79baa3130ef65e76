"""DDTree losslessness proof on one GPU, in one command (about 5-8 minutes on an H100/H200).

Builds a tiny random-weight target (Llama, 4 layers) and random-weight DFlash
drafters (block sizes 8 and 16) and a tokenizer locally (no download), then
runs the patched sglang server (the series applied to a temporary copy of the
pinned 0.5.23 wheel) without speculative decoding (the reference) and with
DDTree at every budget x block size x overlap on/off, with a low
--max-running-requests so request rows are reused, and sends the same
prompts (mixed lengths, all at once) at temperature 0 to each. Every
configuration's token streams must equal the reference exactly; a random
drafter makes acceptance low, and losslessness must hold all the same. Server
logs are scanned for the worker's KV window invariant ("DDTree KV window
overrun") and for tracebacks. Prints a table; exits 1 on any mismatch,
invariant breach, server error or configuration that did not run, 2 on bad
usage or no GPU. Also times tree build + mask packing on the GPU
(benchmarks/ddtree_tree_build.py --device cuda).

--dry-run does everything a CPU allows: builds and validates the models,
builds every exact command line and parses it with the patched sglang (DDTree
resolution included, reading the drafters' configs from disk), then runs the
client, comparison and table against a CPU stand-in server
(ddtree_proof/standin_server.py: the tiny target decoded greedily by
transformers) in place of sglang. A dry run proves the script, not the series.

Usage (GPU host; PYTHON = a venv with CUDA torch and sglang's dependencies,
e.g. the deployment's /opt/sglang/venv/bin/python)::

    PYTHON patches/tools/ddtree_gpu_lossless_proof.py --out ddtree-proof
    .venv-sglang-cpu/bin/python patches/tools/ddtree_gpu_lossless_proof.py --dry-run --out /tmp/proof
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import series  # noqa: E402
from ddtree_proof import compare as C  # noqa: E402
from ddtree_proof import models as M  # noqa: E402
from ddtree_proof import servers as S  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of integers is required") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: positive integers are required")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU: validate, parse the command lines, stand-in servers")
    ap.add_argument("--dry-run-fault", choices=["concurrent-corruption"], help="dry run: corrupt the DDTree stand-ins")
    ap.add_argument("--out", type=Path, default=Path("ddtree-proof"))
    ap.add_argument("--python", default=sys.executable, help="the python that runs the servers")
    ap.add_argument("--blocks", type=_ints, default=[8, 16])
    ap.add_argument("--budgets", type=_ints, default=[4, 8, 16, 32])
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-running", type=int, default=8, help="--max-running-requests (low: rows are reused)")
    ap.add_argument("--parallel", type=int, default=4, help="servers run at once (each takes --mem-fraction)")
    ap.add_argument("--mem-fraction", type=float, default=0.05)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--no-deterministic", action="store_true", help="omit --enable-deterministic-inference")
    ap.add_argument("--ready-timeout", type=float, default=420.0)
    ap.add_argument("--time-limit", type=float, default=570.0, help="no new server starts after this many seconds")
    ap.add_argument("--skip-bench", action="store_true")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.max_new_tokens < 1 or args.max_running < 1 or args.parallel < 1:
        ap.error("--prompts, --max-new-tokens, --max-running and --parallel must be >= 1")
    if not args.dry_run and args.prompts < 200:
        ap.error(f"--prompts {args.prompts}: the proof needs >= 200 prompts on a GPU")
    if args.dry_run_fault and not args.dry_run:
        ap.error("--dry-run-fault needs --dry-run")
    return args


def _serve(cfg: S.Config, argv: list[str], args: argparse.Namespace, *, tree: Path, prompts: list[list[int]],
           reference: list[dict] | None) -> tuple[C.Row, list[dict]]:  # fmt: skip
    row = C.Row(cfg.label, cfg.block, cfg.budget, cfg.overlap)
    srv = S.launch(cfg, argv, python=args.python, out=args.out, tree=tree, dry_run=args.dry_run,
                   fault=args.dry_run_fault)  # fmt: skip
    results: list[dict] = []
    try:
        C.wait_ready(srv.url, timeout_s=args.ready_timeout, alive=srv.alive)
        t0 = time.monotonic()
        results = C.generate(srv.url, prompts, max_new_tokens=args.max_new_tokens, timeout_s=args.ready_timeout)
        row.wall_s = time.monotonic() - t0
    except (RuntimeError, TimeoutError) as exc:
        row.server_problems.append(str(exc))
    finally:
        srv.stop()
    C.scan_log(row, srv.log())
    if results:
        C.compare(row, reference if reference is not None else results, results, args.max_new_tokens)
    return row, results


def _bench(args: argparse.Namespace, tree: Path) -> tuple[bool, str]:
    device = "cpu" if args.dry_run else "cuda"
    cmd = [args.python, str(ROOT / "benchmarks" / "ddtree_tree_build.py"), "--tree", str(tree), "--device", device,
           "--json", str(args.out / "tree_build.json")]  # fmt: skip
    if args.dry_run:
        cmd += ["--reps", "3", "--warmup", "1", "--budgets", "8,16", "--batches", "1,4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    (args.out / "tree_build.md").write_text(proc.stdout + proc.stderr)
    return proc.returncode == 0, proc.stdout


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.dry_run and not S.python_has_cuda(args.python):
        print(f"no CUDA device visible to {args.python}; run with --dry-run on a machine without a GPU",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    with series.given_or_temporary_tree(None, prefix="ddtree-proof-") as tree:
        return prove(args, tree, started)


def prove(args: argparse.Namespace, tree: Path, started: float) -> int:
    sys.path.insert(0, str(tree))
    import cpu_import_shims  # noqa: PLC0415

    cpu_import_shims.install_torchvision_stand_in()
    paths = M.build_all(args.out / "models", args.blocks, dtype=args.dtype)
    checks = M.validate(paths, args.blocks)
    base, tree_cfgs = S.configs(args.blocks, args.budgets)
    argvs = {}
    for cfg in [base, *tree_cfgs]:
        argvs[cfg.label] = S.server_argv(cfg, paths, port=S.free_port(), dtype=args.dtype,
                                         max_running=args.max_running, mem_fraction=args.mem_fraction,
                                         deterministic=not args.no_deterministic)  # fmt: skip
        resolved = S.parse_with_sglang(argvs[cfg.label])
        want_budget = cfg.budget
        if resolved["speculative_ddtree_budget"] != want_budget or (
            cfg.block is not None and resolved["speculative_algorithm"] != "DFLASH"
        ):
            print(f"{cfg.label}: the patched sglang resolved {resolved}", file=sys.stderr)
            return EXIT_FAILED
    (args.out / "command_lines.json").write_text(json.dumps(argvs, indent=2))
    for line in checks:
        print(f"checked: {line}")
    print(f"checked: {len(argvs)} command lines parse and resolve with the patched sglang")

    vocab_size = json.loads((paths["target"] / "config.json").read_text())["vocab_size"]
    vocab = list(range(len(M.SPECIALS), int(vocab_size)))
    prompts = C.make_prompts(args.prompts, vocab)
    base_row, reference = _serve(base, argvs[base.label], args, tree=tree, prompts=prompts, reference=None)
    rows: list[C.Row] = []
    if not base_row.ok:
        rows = [C.Row(c.label, c.block, c.budget, c.overlap, not_run="no reference") for c in tree_cfgs]
    else:
        pending = list(tree_cfgs)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
            futures = {}
            while pending or futures:
                while pending and len(futures) < args.parallel:
                    cfg = pending.pop(0)
                    if time.monotonic() - started > args.time_limit:
                        rows.append(C.Row(cfg.label, cfg.block, cfg.budget, cfg.overlap, not_run="time limit"))
                        continue
                    job = pool.submit(_serve, cfg, argvs[cfg.label], args, tree=tree, prompts=prompts,
                                      reference=reference)  # fmt: skip
                    futures[job] = cfg
                if not futures:
                    break
                done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    futures.pop(fut)
                    rows.append(fut.result()[0])
        rows.sort(key=lambda r: [c.label for c in tree_cfgs].index(r.label))
    bench_ok, bench = (True, "") if args.skip_bench else _bench(args, tree)
    text = C.table(rows, base_row)
    mode = "DRY RUN (CPU stand-in servers, not sglang)" if args.dry_run else "GPU (patched sglang)"
    summary = (
        f"DDTree losslessness proof, {mode}: {len(prompts)} prompts (1-300 tokens) sent at once, "
        f"{args.max_new_tokens} new tokens each at temperature 0, --max-running-requests {args.max_running}, "
        f"dtype {args.dtype}, deterministic inference {'off' if args.no_deterministic else 'on'}"
    )
    print(summary)
    print(text)
    if bench:
        print(bench)
    ok = base_row.ok and all(r.ok for r in rows) and bench_ok
    (args.out / "table.md").write_text(summary + "\n\n" + text + "\n")
    (args.out / "results.json").write_text(json.dumps({
        "mode": mode, "passed": ok, "checks": checks, "bench_ok": bench_ok,
        "rows": [dict(r.__dict__, ok=r.ok) for r in [base_row, *rows]], "wall_s": time.monotonic() - started,
    }, indent=2))  # fmt: skip
    print(f"{'PASS' if ok else 'FAIL'}: {sum(r.ok for r in rows)}/{len(rows)} DDTree configurations identical to "
          f"the reference; results in {args.out}")  # fmt: skip
    return EXIT_OK if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
