"""This repository's benchmark client side by side with NVIDIA AIPerf (from PyPI) on the same cells.

    .venv/bin/python benchmarks/bench_peer_client.py [--cells 1024x8,1024x64] [--requests-per-cell 2]
        [--max-tokens 512] [--repeats 2] [--sim-speed 4] [--peer-venv DIR] [--no-build] [--json FILE]

The peer is ``aiperf`` 0.13.0, installed on first use with pip into its own
venv (default ``.cache/peer-venvs/aiperf``, git-ignored); ``--no-build``
refuses to build it and says so. If it cannot be installed or run, the script
prints exactly why and exits 1.

One simulated engine (DDTree b8 t4 w2048, metrics on) runs pinned to CPU 0;
both clients run on CPU 1, alternately, on every cell (context x
concurrency): the same prompts (built to the context with the server's
``/tokenize``; AIPerf reads them from a ``single_turn`` JSONL file), streaming
chat completions, temperature 0, ``max_tokens`` with ``ignore_eos``, the same
concurrency and request count, and server-reported token counts for both
(``--use-server-token-count``). AIPerf counts tokens offline with a small
word-level tokenizer written for it (only for its prompt statistics).

Per run it takes:

- aggregate output tok/s (ours: server-reported tokens of the successful
  requests over the first-send .. last-byte span; AIPerf: ``output_token_throughput``);
- TTFT p50 (both: to the first content-bearing chunk);
- per-token ITL p50 (ours: (last text chunk - first) / (tokens - 1) per request;
  AIPerf: ``inter_token_latency``, its per-request (latency - TTFT) / (tokens - 1));
- client CPU as % of one core over the measured window (ours:
  ``time.process_time``; AIPerf: the CPU time of its whole process tree,
  sampled from ``/proc`` every 50 ms, between its own ``start_time`` and
  ``end_time``, so its start-up and report writing are left out);
- the engine's own mean end-to-end latency and mean TTFT over the same run
  (histogram deltas), and each client's means against them: the engine's
  clock arbitrates when the two clients disagree.

It prints one row per cell with both clients' medians over the repeats and the
ratios ours / AIPerf. Every figure depends on the simulated engine and its
``--sim-speed`` (printed with them): a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client_accuracy import pin, prepare, start_pinned_engine  # noqa: E402

from repro_py.bench import counters, stats  # noqa: E402
from repro_py.bench.figures import repeat_figures  # noqa: E402
from repro_py.bench.matrix import flush_cache, run_requests  # noqa: E402
from repro_py.bench.prompts import BuiltPrompt  # noqa: E402
from repro_py.endpoint import Endpoint  # noqa: E402

PEER = "aiperf==0.13.0"
DEFAULT_VENV = REPO / ".cache" / "peer-venvs" / "aiperf"
CLK_TCK = os.sysconf("SC_CLK_TCK")

TOKENIZER_WRITER = r'''
import json, sys
from pathlib import Path
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
tok = Tokenizer(models.WordLevel({"[UNK]": 0, "<s>": 1, "</s>": 2}, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\s+|\S+"), behavior="isolated")
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
    "eos_token": "</s>", "model_max_length": 1048576}))
'''


def ensure_peer(venv: Path, *, build: bool) -> str | None:
    """``None`` when AIPerf runs from ``venv``; otherwise exactly why it cannot run here."""
    exe = venv / "bin" / "aiperf"
    log = venv.parent / f"{venv.name}.build.log"
    if not exe.exists():
        if not build:
            return f"no AIPerf at {exe} and --no-build was given"
        venv.parent.mkdir(parents=True, exist_ok=True)
        print(f"installing {PEER} into {venv} (log: {log}) ...", flush=True)
        with log.open("ab") as fh:
            for cmd in ([sys.executable, "-m", "venv", str(venv)],
                        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", PEER]):
                rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=1800, check=False).returncode
                if rc != 0:
                    return f"{' '.join(cmd[-2:])} failed (exit {rc}); see {log}"
    probe = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0:
        tail = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return f"aiperf --version failed in {venv}: {tail[0]}"
    return None


def _tree_ticks(root: int) -> int:
    """utime + stime (clock ticks) of ``root`` and every descendant alive now."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        ticks[pid] = int(fields[11]) + int(fields[12])
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total


class TreeCpu:
    """Samples a process tree's CPU time every 50 ms; ``between(t0, t1)`` is the CPU seconds in that window."""

    def __init__(self, root: int) -> None:
        self.root, self.samples = root, [(time.time(), 0)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.samples.append((time.time(), _tree_ticks(self.root)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def between(self, t0: float, t1: float) -> float | None:
        inside = [(t, c) for t, c in self.samples if t0 <= t <= t1]
        if len(inside) < 2:
            return None
        return (inside[-1][1] - inside[0][1]) / CLK_TCK / max(inside[-1][0] - inside[0][0], 1e-9) * (t1 - t0)


def engine_ms(before: counters.CounterSnapshot, after: counters.CounterSnapshot) -> tuple[float | None, float | None]:
    """The engine's own mean end-to-end latency and mean TTFT over the run (histogram deltas), in ms."""
    timing = counters.engine_timing(before, after)
    e2e, ttft = timing.e2e_mean_s, timing.ttft_mean_s
    return (None if e2e is None else e2e * 1000.0), (None if ttft is None else ttft * 1000.0)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


async def run_ours(
    session: aiohttp.ClientSession, ep: Endpoint, prompt: BuiltPrompt, *, concurrency: int, requests: int,
    max_tokens: int,
) -> dict[str, Any]:
    await flush_cache(session, ep)
    before = await counters.read_settled(session, ep)
    cpu0 = time.process_time()
    results, wall = await run_requests(session, ep, prompt, count=requests, concurrency=concurrency,
                                       max_tokens=max_tokens, temperature=0.0, timeout_s=600.0, ignore_eos=True)
    cpu = time.process_time() - cpu0
    after = await counters.read_settled(session, ep)
    fig = repeat_figures(results, wall, counters.delta(before, after))
    e2e = stats.mean([r.latency_s * 1000.0 for r in results if r.ok])
    ttft = stats.mean([r.ttft_s * 1000.0 for r in results if r.ok and r.ttft_s is not None])
    engine_e2e, engine_ttft = engine_ms(before, after)
    return {
        "tps": fig["output_tps"], "ttft_ms_p50": fig["ttft_ms"]["p50"], "itl_token_ms_p50": fig["itl_token_ms"]["p50"],
        "itl_chunk_ms_p50": fig["itl_chunk_ms"]["p50"], "cpu_pct": 100.0 * cpu / float(fig["wall_s"]),
        "errors": fig["errors"], "e2e_ms": e2e, "engine_e2e_ms": engine_e2e, "ttft_ms_mean": ttft,
        "engine_ttft_ms": engine_ttft, "client_engine_e2e": _ratio(e2e, engine_e2e),
        "client_engine_ttft": _ratio(ttft, engine_ttft),
    }


async def run_aiperf(
    session: aiohttp.ClientSession, ep: Endpoint, *, venv: Path, work: Path, concurrency: int, requests: int,
    max_tokens: int, tag: str,
) -> dict[str, Any]:
    await flush_cache(session, ep)
    before = await counters.read_settled(session, ep)
    out = work / f"aiperf-{tag}"
    cmd = [
        "taskset", "-c", "1", str(venv / "bin" / "aiperf"), "profile", "--model", "default", "--url", ep.base_url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", str(work / "tokenizer"),
        "--input-file", str(work / "prompts.jsonl"), "--custom-dataset-type", "single_turn",
        "--concurrency", str(concurrency), "--request-count", str(requests), "--warmup-request-count", "1",
        "--extra-inputs", f"max_tokens:{max_tokens}", "--extra-inputs", "ignore_eos:true", "--extra-inputs",
        "temperature:0", "--use-legacy-max-tokens",
        "--use-server-token-count", "--output-artifact-dir", str(out), "--no-auto-plot",
    ]
    # (HF_HUB_OFFLINE would make aiperf 0.13.0 take the local tokenizer directory for a hub repo id)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT, env=env)
    sampler = TreeCpu(proc.pid)
    output, _ = await proc.communicate()
    sampler.close()
    after = await counters.read_settled(session, ep)
    export = out / "profile_export_aiperf.json"
    if proc.returncode != 0 or not export.exists():
        tail = output.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"aiperf exited {proc.returncode}: " + " | ".join(tail))
    doc = json.loads(export.read_text())
    t0 = datetime.datetime.fromisoformat(doc["start_time"]).timestamp()
    t1 = datetime.datetime.fromisoformat(doc["end_time"]).timestamp()
    cpu = sampler.between(t0, t1)
    e2e = float(doc["request_latency"]["avg"])
    ttft = float(doc["time_to_first_token"]["avg"])
    engine_e2e, engine_ttft = engine_ms(before, after)
    return {
        "tps": float(doc["output_token_throughput"]["avg"]), "ttft_ms_p50": float(doc["time_to_first_token"]["p50"]),
        "itl_token_ms_p50": float(doc["inter_token_latency"]["p50"]),
        "itl_chunk_ms_p50": float(doc["inter_chunk_latency"]["p50"]),
        "cpu_pct": None if cpu is None else 100.0 * cpu / max(t1 - t0, 1e-9),
        "errors": int((doc.get("error_request_count") or {}).get("avg") or 0), "e2e_ms": e2e,
        "engine_e2e_ms": engine_e2e, "ttft_ms_mean": ttft, "engine_ttft_ms": engine_ttft,
        "client_engine_e2e": _ratio(e2e, engine_e2e), "client_engine_ttft": _ratio(ttft, engine_ttft),
    }


async def compare(args: argparse.Namespace, url: str, venv: Path, work: Path) -> dict[str, Any]:
    ep = Endpoint(url)
    runs: dict[str, Any] = {}
    biggest = max(c for _, c in args.cells)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=biggest + 8)) as session:
        for context, concurrency in args.cells:
            requests = args.requests_per_cell * concurrency
            prompt = await prepare(session, ep, context, concurrency)
            with (work / "prompts.jsonl").open("w", encoding="utf-8") as fh:
                for i in range(requests + 1):
                    fh.write(json.dumps({"text": prompt.text(i)}) + "\n")
            cell = runs.setdefault(f"{context}x{concurrency}", {"ours": [], "aiperf": []})
            for rep in range(args.repeats):
                ours = await run_ours(session, ep, prompt, concurrency=concurrency, requests=requests,
                                      max_tokens=args.max_tokens)
                peer = await run_aiperf(session, ep, venv=venv, work=work, concurrency=concurrency, requests=requests,
                                        max_tokens=args.max_tokens, tag=f"{context}x{concurrency}-{rep}")
                cell["ours"].append(ours)
                cell["aiperf"].append(peer)
                print(f"  ctx {context} C {concurrency} run {rep}: ours {ours['tps']:.0f} tok/s "
                      f"({ours['cpu_pct']:.0f}% CPU), aiperf {peer['tps']:.0f} tok/s "
                      f"({_num(peer['cpu_pct'])}% CPU), errors {ours['errors']}/{peer['errors']}", flush=True)
    return runs


def _num(value: float | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _med(rows: list[dict[str, Any]], key: str) -> float | None:
    return stats.median([float(r[key]) for r in rows if r.get(key) is not None])


def table(runs: dict[str, Any]) -> list[str]:
    keys = (("tps", "tok/s", ".0f"), ("ttft_ms_p50", "TTFT p50 ms", ".1f"),
            ("itl_token_ms_p50", "ITL/token p50 ms", ".2f"), ("cpu_pct", "client CPU %", ".0f"))
    lines = ["| cell (ctx x C) | " + " | ".join(f"{h}: ours / AIPerf (ratio)" for _, h, _ in keys)
             + " | client/engine mean e2e: ours / AIPerf | client/engine mean TTFT: ours / AIPerf |",
             "|---|" + "---|" * (len(keys) + 2)]
    for name, cell in runs.items():
        parts = []
        for key, _, spec in keys:
            a, b = _med(cell["ours"], key), _med(cell["aiperf"], key)
            ratio = a / b if a is not None and b else None
            parts.append(f"{_num(a, spec)} / {_num(b, spec)} ({_num(ratio, '.3f')})")
        for key in ("client_engine_e2e", "client_engine_ttft"):
            a, b = _med(cell["ours"], key), _med(cell["aiperf"], key)
            parts.append(f"{_num(a, '.3f')} / {_num(b, '.3f')}")
        lines.append(f"| {name} | " + " | ".join(parts) + " |")
    return lines


def cell_list(text: str) -> list[tuple[int, int]]:
    try:
        cells = [tuple(int(x) for x in part.split("x")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give cells as CONTEXTxCONCURRENCY,..., e.g. 1024x8,1024x64") from None
    if not cells or any(len(c) != 2 or min(c) < 1 for c in cells):
        raise argparse.ArgumentTypeError(f"{text!r}: give cells as CONTEXTxCONCURRENCY,..., e.g. 1024x8,1024x64")
    return [(c[0], c[1]) for c in cells]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=cell_list, default=cell_list("1024x8,1024x64"))
    p.add_argument("--requests-per-cell", type=int, default=2, help="requests per run, in multiples of concurrency")
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sim-speed", type=float, default=4.0)
    p.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--no-build", action="store_true", help="do not install AIPerf when it is missing")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    venv = args.peer_venv.resolve()
    why = ensure_peer(venv, build=not args.no_build)
    if why:
        print(f"PEER NOT RUN: {why}")
        return 1
    client_cpu = pin(0, 1)
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        work = Path(tmp)
        subprocess.run([str(venv / "bin" / "python"), "-c", TOKENIZER_WRITER, str(work / "tokenizer")], check=True)
        eng, engine_cpu = start_pinned_engine(args.sim_speed, work / "models")
        try:
            print(f"engine pid {eng.pid} ({engine_cpu}); clients on {client_cpu}; SIMULATED engine, "
                  f"sim_speed={args.sim_speed:g}; peer {PEER} from {venv}")
            print(f"cells {', '.join(f'{c}x{n}' for c, n in args.cells)}: {args.requests_per_cell} x concurrency "
                  f"requests x max_tokens {args.max_tokens} (ignore_eos, temperature 0, streaming chat), "
                  f"{args.repeats} runs of each client, alternating")
            runs = asyncio.run(compare(args, eng.url, venv, work))
        except RuntimeError as exc:
            print(f"PEER FAILED: {exc}")
            return 1
        finally:
            eng.stop()
    print(f"\nmedians over {args.repeats} runs (SIMULATED engine, sim_speed {args.sim_speed:g}); ratio = ours / AIPerf")
    print("\n".join(table(runs)))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
