"""DDTree losslessness proof on one GPU, in one command (planned under 8 minutes of servers).

Builds a tokenizer, a tiny target and DFlash drafters (block sizes 8 and 16)
locally, with weights built so the drafter proposes the target's own
continuation at depths 1-4 (ddtree_proof/construct.py): accepts of depth >= 2
happen on most verify steps. Runs the patched sglang server (the series applied
to a copy of the proof environment's own sglang) without speculative decoding
(the reference) and with DDTree at each (block, budget) x overlap on/off, all
with chunked prefill, a KV pool small enough that decode retracts requests,
sglang's forced-retraction hook and its KV page invariant checker on, and
prompts that share prefixes or run to the end of the context. Every
configuration's token streams must equal the reference exactly, no server log
may show the KV window invariant ("DDTree KV window overrun"), an assertion or
a traceback, every DDTree configuration must see >= --min-deep-accepts accepts
of depth >= 2 and a forced retraction. The sampled part (ddtree_proof/sampled.py)
serves a softened copy of the target from two more servers, the baseline and
DDTree (B 8, budget 16, overlap on), with 20,000 sampled requests per
temperature (0.6 and 1.0; top_p 0.9, top_k 4) over two prompts: the first 4
tokens of DDTree must follow the exact distribution and the baseline's
(chi-square at 1e-4 each), and DDTree must accept drafts while sampling.
Exit 0 on a pass, 1 on any failure or configuration that did not run within
--time-limit, 2 on bad usage or no GPU.

The environment (GPU): a virtual environment built OFFLINE from the
deployment's own lock and wheelhouse (--lock, --wheelhouse, --local-wheel:
the way roles/python_env installs the host), reused while they are unchanged;
or --python, an existing environment (e.g. the deployment's). Either way the
series is applied to a copy of that environment's sglang (cp312 on the
bundle's hosts): no other wheel is needed.

Before any server starts it prints the plan: per configuration the expected
accepts by depth (the drafter's forward re-implemented on CPU over the
target's greedy streams, ddtree_proof/draft_sim.py) and the planned duration
(ddtree_proof/plan.py: the workload's iterations under stated assumptions);
it refuses to run a plan over --time-limit or under --min-deep-accepts.

--dry-run does everything a CPU allows: models, their validation, the plan,
every exact command line parsed with the patched sglang, and the client,
comparison and table against CPU stand-in servers
(ddtree_proof/standin_server.py) in place of sglang. It proves the script and
the plan, not the series.

Usage::

    python3 patches/tools/ddtree_gpu_lossless_proof.py --wheelhouse WHEELHOUSE --out ddtree-proof
    python3 patches/tools/ddtree_gpu_lossless_proof.py --python /opt/sglang/venv/bin/python --out ddtree-proof
    .venv-sglang-cpu/bin/python patches/tools/ddtree_gpu_lossless_proof.py --dry-run --out /tmp/proof
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import series  # noqa: E402
from ddtree_proof import compare as C  # noqa: E402
from ddtree_proof import plan as P  # noqa: E402
from ddtree_proof import sampled as SP  # noqa: E402
from ddtree_proof import servers as S  # noqa: E402
from ddtree_proof import venv as V  # noqa: E402

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_SHAPES = "8:4,8:16,16:32"


def _shapes(text: str) -> list[tuple[int, int]]:
    try:
        pairs = [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: BLOCK:BUDGET pairs, comma-separated, are required") from None
    if not pairs or any(len(p) != 2 or p[0] < 2 or p[1] < 1 for p in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: BLOCK:BUDGET pairs with BLOCK >= 2 and BUDGET >= 1")
    return [(int(p[0]), int(p[1])) for p in pairs]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU: models, plan, command lines, stand-in servers")
    ap.add_argument("--dry-run-fault", choices=["concurrent-corruption", "sampled-greedy"],
                    help="dry run: corrupt the DDTree stand-ins")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("ddtree-proof"))
    ap.add_argument("--python", help="an existing environment's python for the servers (else one is built)")
    ap.add_argument("--wheelhouse", type=Path, help="the deployment's wheelhouse (offline install)")
    ap.add_argument("--lock", type=Path, default=ROOT / "requirements" / "sglang-0.5.23-cu130.lock")
    ap.add_argument("--local-wheel", type=Path, action="append", default=[], help="installed --no-deps after the lock")
    ap.add_argument("--venv", type=Path, help="where to build the environment (default OUT/venv)")
    ap.add_argument("--venv-python", default="python3.12", help="the interpreter that creates it (the lock's: 3.12)")
    ap.add_argument(
        "--shapes", type=_shapes, default=_shapes(DEFAULT_SHAPES), help=f"BLOCK:BUDGET,... ({DEFAULT_SHAPES})"
    )
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=P.MAX_NEW_TOKENS)
    ap.add_argument("--parallel", type=int, default=4, help="servers run at once (each takes --mem-fraction)")
    ap.add_argument("--mem-fraction", type=float, default=0.05)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--no-deterministic", action="store_true", help="omit --enable-deterministic-inference")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--time-limit", type=float, default=P.TIME_LIMIT_S, help="servers: planned and enforced")
    ap.add_argument("--min-deep-accepts", type=int, default=100, help="accepts of depth >= 2 each DDTree row needs")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--sampled-samples", type=int, default=SP.SAMPLES,
                    help=f"sampled part: requests per prompt and temperature ({SP.SAMPLES})")  # fmt: skip
    ap.add_argument("--skip-sampled", action="store_true", help="dry run only: without the sampled part")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.max_new_tokens < 1 or args.parallel < 1:
        ap.error("--prompts, --max-new-tokens and --parallel must be >= 1")
    if not args.dry_run and args.prompts < 48:
        ap.error(f"--prompts {args.prompts}: the proof needs >= 48 prompts on a GPU")
    if not args.dry_run and (args.skip_sampled or args.sampled_samples < SP.SAMPLES):
        ap.error(f"--sampled-samples {args.sampled_samples} / --skip-sampled: the proof needs the sampled part with "
                 f">= {SP.SAMPLES} samples per prompt and temperature on a GPU")  # fmt: skip
    if args.sampled_samples < 50:
        ap.error(f"--sampled-samples {args.sampled_samples}: at least 50 are needed for the chi-square cells")
    if args.dry_run_fault and not args.dry_run:
        ap.error("--dry-run-fault needs --dry-run")
    if not args.dry_run and args.python is None and args.wheelhouse is None:
        ap.error("on a GPU give --wheelhouse (the environment is built offline from --lock) or --python")
    return args


@contextlib.contextmanager
def environment(args: argparse.Namespace) -> Iterator[tuple[str, Path, str]]:
    """(the servers' python, the patched tree, how it was made)."""
    with tempfile.TemporaryDirectory(prefix="ddtree-proof-") as tmp:
        if args.wheelhouse is not None or args.python is not None:
            python = args.python
            if python is None:  # a dry run exercising the offline build (its servers are CPU stand-ins)
                venv = args.venv or args.out / "venv"
                built, fresh = V.build(args.venv_python, venv, args.lock, args.wheelhouse, args.local_wheel)
                python = str(built)
                print(f"environment: {venv} {'built' if fresh else 'reused'} offline from {args.lock.name} + "
                      f"{args.wheelhouse}")  # fmt: skip
            tree, how = V.patched_tree(python, Path(tmp) / "tree")
            yield (sys.executable if args.dry_run else python), tree, f"series {how} to {python}'s sglang"
        else:
            tree = series.patched_tree(Path(tmp) / "tree")
            yield sys.executable, tree, f"series applied to the pinned wheel {series.WHEEL_NAME}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if not args.dry_run and args.python is None:
            # Build the environment, then run the proof inside it (it has torch and transformers).
            venv = args.venv or args.out / "venv"
            built, fresh = V.build(args.venv_python, venv, args.lock, args.wheelhouse, args.local_wheel)
            print(f"environment: {venv} {'built' if fresh else 'reused'} offline from {args.lock.name} + "
                  f"{args.wheelhouse}", flush=True)  # fmt: skip
            rest = list(sys.argv[1:] if argv is None else argv)
            os.execv(str(built), [str(built), str(Path(__file__).resolve()), *rest, "--python", str(built)])
        with environment(args) as (python, tree, how):
            if not args.dry_run and not S.python_has_cuda(python):
                print(f"no CUDA device visible to {python}; run with --dry-run on a machine without a GPU",
                      file=sys.stderr)  # fmt: skip
                return EXIT_USAGE
            print(f"checked: {how}")
            return prove(args, python, tree, started)
    except (V.EnvError, series.SeriesError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def prepare(args: argparse.Namespace, tree: Path) -> tuple | None:
    """Models, the plan and the command lines; None (and a message) when the plan cannot prove."""
    sys.path.insert(0, str(tree))
    import cpu_import_shims  # noqa: PLC0415
    from ddtree_proof import draft_sim as DS  # noqa: PLC0415
    from ddtree_proof import models as M  # noqa: PLC0415
    from ddtree_proof import reference as R  # noqa: PLC0415

    cpu_import_shims.install_torchvision_stand_in()
    sampled_cfgs = [] if args.skip_sampled else P.sampled_configs(*SP.SHAPE)
    blocks = sorted({b for b, _ in args.shapes} | {c.block for c in sampled_cfgs if c.block})
    paths = M.build_all(args.out / "models", blocks, dtype=args.dtype)
    for line in M.validate(paths, blocks):
        print(f"checked: {line}")
    vocab = M.working_vocabulary(paths)["tokens"]
    prompts = P.make_prompts(args.prompts, vocab)
    streams = R.streams(paths["target"], prompts, args.max_new_tokens)
    base, tree_cfgs = P.configs(args.shapes)
    sampled = _prepare_sampled(args, paths, vocab) if sampled_cfgs else None
    plans = [P.server_plan(base, prompts, [args.max_new_tokens] * len(prompts))]
    for cfg in tree_cfgs:
        sim = DS.DraftSim(paths[f"drafter-b{cfg.block}"], paths["target"])
        per_prompt = [
            DS.expected_accepts(sim, [p], [s], budget=cfg.budget, topk=S.TOPK_CAP)
            for p, s in zip(prompts, streams, strict=True)
        ]
        plans.append(P.with_expectation(P.server_plan(cfg, prompts, [e.verify_steps for e in per_prompt]), per_prompt))
    requests = args.sampled_samples * len(SP.TEMPERATURES) * 2
    plans += [P.sampled_plan(cfg, requests, SP.N_TOKENS, SP.MAX_RUNNING) for cfg in sampled_cfgs]
    total = P.schedule_seconds(plans, args.parallel)
    print(P.table(plans, total, args.parallel))
    P.write_json(args.out / "plan.json", plans, total)
    short = [p.config.label for p in plans[1:] if not p.config.sampled
             and (p.expected_deep_accepts or 0) < args.min_deep_accepts]  # fmt: skip
    if total > args.time_limit or short:
        print(
            f"the plan cannot prove: {total:.0f} s planned (limit {args.time_limit:.0f} s); under "
            f"{args.min_deep_accepts} expected accepts of depth >= 2: {short or 'none'}",
            file=sys.stderr,
        )
        return None
    argvs = command_lines(args, paths, [base, *tree_cfgs, *sampled_cfgs])
    if argvs is None:
        return None
    expected = {p.config.label: p.expected_deep_accepts for p in plans}
    return paths, prompts, streams, base, tree_cfgs, argvs, expected, (sampled_cfgs, sampled)


def _prepare_sampled(args: argparse.Namespace, paths: dict[str, Path], vocab: list[int]) -> dict:
    """The sampled part's target, prompts and exact distributions (CPU, before any server)."""
    from ddtree_proof import reference as R  # noqa: PLC0415

    paths["target-sampled"] = SP.soften(paths["target"], args.out / "models" / "target-sampled", vocab)
    model, greedy_model = R.load(paths["target-sampled"]), R.load(paths["target"])
    prompts = SP.prompts(vocab)
    for line in SP.validate(model, greedy_model, prompts):
        print(f"checked: {line}")
    exact = {(i, t): SP.exact(model, p, t) for i, p in enumerate(prompts) for t in SP.TEMPERATURES}
    sizes = ", ".join(f"prompt {i} T={t}: {len(d)}" for (i, t), d in exact.items())
    print(f"checked: sampled part: exact distributions of the first {SP.N_TOKENS} tokens enumerated ({sizes} "
          f"sequences), {args.sampled_samples} samples per prompt and temperature")  # fmt: skip
    return {"prompts": prompts, "exact": exact}


def command_lines(args: argparse.Namespace, paths: dict[str, Path], cfgs: list[P.Config]) -> dict | None:
    """Every server's exact command line, parsed and resolved by the patched sglang."""
    argvs = {}
    for cfg in cfgs:
        argvs[cfg.label] = S.server_argv(
            cfg, paths, port=S.free_port(), dtype=args.dtype, mem_fraction=args.mem_fraction,
            deterministic=not args.no_deterministic,
        )  # fmt: skip
        resolved = S.parse_with_sglang(argvs[cfg.label])
        spec_ok = cfg.block is None or resolved["speculative_algorithm"] == "DFLASH"
        spec_ok = spec_ok and resolved["disable_overlap_schedule"] == (not cfg.overlap)
        if resolved["speculative_ddtree_budget"] != cfg.budget or not spec_ok:
            print(f"{cfg.label}: the patched sglang resolved {resolved}", file=sys.stderr)
            return None
    (args.out / "command_lines.json").write_text(json.dumps(argvs, indent=2))
    print(f"checked: {len(argvs)} command lines parse and resolve with the patched sglang")
    return argvs


def _serve(cfg: P.Config, argv: list[str], args: argparse.Namespace, *, python: str, tree: Path,
           paths: dict[str, Path], prompts: list[list[int]], deadline: float,
           sampled_prompts: list[list[int]]) -> tuple[C.Row, list[dict] | dict]:  # fmt: skip
    row = C.Row(cfg.label, cfg.block, cfg.budget, cfg.overlap, need_retraction=not args.dry_run)
    srv = S.launch(cfg, argv, python=python, out=args.out, tree=tree, dry_run=args.dry_run, paths=paths,
                   fault=args.dry_run_fault)  # fmt: skip
    results: list[dict] | dict = []
    try:
        left = deadline - time.monotonic()
        C.wait_ready(srv.url, timeout_s=min(args.ready_timeout, max(left, 1.0)), alive=srv.alive)
        t0 = time.monotonic()
        if cfg.sampled:
            results = SP.sample(srv.url, sampled_prompts, args.sampled_samples,
                                timeout_s=max(deadline - time.monotonic(), 1.0))  # fmt: skip
        else:
            results = C.generate(srv.url, prompts, max_new_tokens=args.max_new_tokens,
                                 timeout_s=max(deadline - time.monotonic(), 1.0))  # fmt: skip
        row.wall_s = time.monotonic() - t0
    except (RuntimeError, TimeoutError) as exc:
        row.server_problems.append(str(exc))
    finally:
        srv.stop()
    C.scan_log(row, srv.log())
    return row, results


def run_servers(args, *, python, tree, paths, prompts, cfgs, argvs, started, sampled_prompts) -> dict:
    """Every server, `parallel` at a time; none starts after the deadline (NOT RUN)."""
    deadline = started + args.time_limit
    out: dict[str, tuple[C.Row, list[dict]]] = {}
    pending = list(cfgs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures: dict = {}
        while pending or futures:
            while pending and len(futures) < args.parallel:
                cfg = pending.pop(0)
                if time.monotonic() > deadline:
                    out[cfg.label] = (C.Row(cfg.label, cfg.block, cfg.budget, cfg.overlap, not_run="time limit"), [])
                    continue
                job = pool.submit(_serve, cfg, argvs[cfg.label], args, python=python, tree=tree, paths=paths,
                                  prompts=prompts, deadline=deadline, sampled_prompts=sampled_prompts)  # fmt: skip
                futures[job] = cfg
            if not futures:
                break
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            for fut in done:
                out[futures.pop(fut).label] = fut.result()
    return out


def prove(args: argparse.Namespace, python: str, tree: Path, started: float) -> int:
    prepared = prepare(args, tree)
    if prepared is None:
        return EXIT_FAILED
    paths, prompts, streams, base, tree_cfgs, argvs, expected, (sampled_cfgs, sampled) = prepared
    served = run_servers(
        args, python=python, tree=tree, paths=paths, prompts=prompts, cfgs=[base, *tree_cfgs, *sampled_cfgs],
        argvs=argvs, started=started, sampled_prompts=sampled["prompts"] if sampled else [],
    )  # fmt: skip
    base_row, reference = served[base.label]
    if reference:
        C.compare(base_row, [{"output_ids": s} for s in streams], reference, args.max_new_tokens)
    rows = []
    for cfg in tree_cfgs:
        row, results = served[cfg.label]
        row.expected_deep, row.min_deep = expected[cfg.label], args.min_deep_accepts
        if results and reference and base_row.not_run is None:
            C.compare(row, reference, results, args.max_new_tokens)
        elif row.not_run is None and not row.server_problems:
            row.server_problems.append("no reference (the baseline did not serve)")
        rows.append(row)
    sampled_rows, checks = _compare_sampled(args, served, sampled_cfgs, sampled)
    bench_ok, bench = (True, "") if args.skip_bench else _bench(args, tree, python)
    return report(args, base_row, rows, bench=(bench_ok, bench), started=started, sampled=(sampled_rows, checks))


def _compare_sampled(args: argparse.Namespace, served: dict, cfgs: list[P.Config], sampled: dict | None) -> tuple:
    """The sampled part's rows (server problems, not-run) and its distribution checks."""
    if not cfgs or sampled is None:
        return [], []
    rows = [served[c.label][0] for c in cfgs]
    base_replies, tree_replies = (served[c.label][1] or {} for c in cfgs)
    checks = SP.compare(tree_replies, base_replies, sampled["exact"])
    if not args.dry_run:  # the sampled DDTree server must accept drafts (the stand-ins report none)
        for c in checks:
            if c.accept_length is None or c.accept_length < SP.MIN_ACCEPT:
                c.errors += 1
                c.first_error = c.first_error or f"mean accept length {c.accept_length} < {SP.MIN_ACCEPT}"
    return rows, checks


def _bench(args: argparse.Namespace, tree: Path, python: str) -> tuple[bool, str]:
    device = "cpu" if args.dry_run else "cuda"
    cmd = [python, str(ROOT / "benchmarks" / "ddtree_tree_build.py"), "--tree", str(tree), "--device", device,
           "--json", str(args.out / "tree_build.json")]  # fmt: skip
    if args.dry_run:
        cmd += ["--reps", "3", "--warmup", "1", "--budgets", "8,16", "--batches", "1,4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    (args.out / "tree_build.md").write_text(proc.stdout + proc.stderr)
    return proc.returncode == 0, proc.stdout


def report(args: argparse.Namespace, base_row: C.Row, rows: list[C.Row], *, bench: tuple[bool, str],
           started: float, sampled: tuple = ([], [])) -> int:  # fmt: skip
    bench_ok, bench_text = bench
    sampled_rows, checks = sampled
    text = C.table(rows, base_row)
    if checks or sampled_rows:
        text += "\n\n" + SP.table(checks) + "\n" + SP.servers(sampled_rows)
    mode = "DRY RUN (CPU stand-in servers, not sglang)" if args.dry_run else "GPU (patched sglang)"
    wall = time.monotonic() - started
    summary = (
        f"DDTree losslessness proof, {mode}: {args.prompts} prompts sent at once, {args.max_new_tokens} new tokens "
        f"each at temperature 0, --max-running-requests {P.MAX_RUNNING}, chunked prefill {P.CHUNKED_PREFILL}, "
        f"KV pool {P.MAX_TOTAL_TOKENS} tokens, context {P.CONTEXT_LEN}, dtype {args.dtype}, deterministic inference "
        f"{'off' if args.no_deterministic else 'on'}; measured {wall:.0f} s in all"
    )
    print(summary)
    print(text)
    if bench_text:
        print(bench_text)
    sampled_ok = all(r.not_run is None and not r.server_problems and r.invariant_breaches == 0 for r in sampled_rows)
    sampled_ok = sampled_ok and all(c.ok for c in checks) and (args.skip_sampled or len(checks) > 0)
    ok = base_row.ok and all(r.ok for r in rows) and bench_ok and sampled_ok
    (args.out / "table.md").write_text(summary + "\n\n" + text + "\n")
    (args.out / "results.json").write_text(json.dumps({
        "mode": mode, "passed": ok, "bench_ok": bench_ok, "wall_s": wall,
        "rows": [dict(r.__dict__, ok=r.ok, deep_accepts=r.deep_accepts) for r in [base_row, *rows]],
        "sampled": {"ok": sampled_ok, "checks": [dict(c.__dict__, tree_vs_exact=str(c.tree_vs_exact),
                    base_vs_exact=str(c.base_vs_exact), tree_vs_base=str(c.tree_vs_base), ok=c.ok) for c in checks],
                    "rows": [dict(r.__dict__, ok=r.ok) for r in sampled_rows]},
    }, indent=2))  # fmt: skip
    passed = sum(r.ok for r in rows)
    sampled_line = "" if args.skip_sampled else (
        f"; sampled: {sum(c.ok for c in checks)}/{len(checks)} distribution checks pass")
    print(
        f"{'PASS' if ok else 'FAIL'}: {passed}/{len(rows)} DDTree configurations identical to the reference with "
        f">= {args.min_deep_accepts} accepts of depth >= 2 each{sampled_line}; results in {args.out}"
    )
    return EXIT_OK if ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
