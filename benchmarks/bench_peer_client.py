"""The same benchmark cell measured by this repository's client and by SGLang's own ``bench_serving``.

    .venv/bin/python benchmarks/bench_peer_client.py [--sim-speed 4] [--concurrency 64] [--context 1024]
        [--max-tokens 512] [--requests 128] [--repeats 3] [--peer-venv DIR] [--no-build] [--json FILE]

The peer is ``sglang.benchmark.serving`` (what ``python -m sglang.bench_serving``
runs) from the real sglang 0.5.23 wheel, in a scratch venv (default
``.cache/peer-client-venv``, git-ignored). When that venv is missing it is built
with the project's ``patches/tools/make-cpu-venv.sh`` (torch CPU, the wheel
``--no-deps``, its light deps) plus ``transformers==5.19.0``,
``tokenizers==0.23.2`` (the wheel's pins) and ``datasets``; ``--no-build``
refuses to build and says so. Importing ``sglang.srt.disaggregation.utils``
(for one constant, the fake bootstrap host of prefill/decode disaggregation,
unused here) drags in the multimodal model configs and ``torchvision``, which
has no build for this CPU torch; that one module is replaced by a stub holding
the constant. Every other line the peer runs is the wheel's own.

Offline, the peer needs a tokenizer: a small word-level one is written for it
(it only uses it to count its prompt lengths and to re-tokenize outputs; with
speculative decoding it divides each chunk gap by the chunk's re-tokenized
length, so its ITL is per token while ours is per chunk; with this stand-in
tokenizer, which also counts whitespace runs, its per-token ITL is not a
meaningful figure: compare throughput and TTFT). Both
clients send the same prompts (built to the requested length with the server's
``/tokenize``), chat completions with streaming, temperature 0, ``ignore_eos``,
the same max tokens, concurrency and request count, against the same engine
process (pinned to CPU 0; clients on CPU 1), alternating runs. Each run also
gets the engine's own figure (delta of ``sglang:generation_tokens_total`` over
its busy wall time), so either client can be checked against the engine.

Every figure is influenced by the simulated engine and its ``--sim-speed``. If
the peer cannot run here the script prints exactly why and exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client_accuracy import (  # noqa: E402
    engine_window,
    measure_repeat,
    pin,
    prepare,
    start_pinned_engine,
)

from repro_py.bench import counters, stats  # noqa: E402
from repro_py.bench.matrix import flush_cache  # noqa: E402
from repro_py.bench.prompts import BuiltPrompt  # noqa: E402
from repro_py.endpoint import Endpoint  # noqa: E402

DEFAULT_VENV = REPO / ".cache" / "peer-client-venv"
PEER_PINS = ["transformers==5.19.0", "tokenizers==0.23.2", "datasets"]

# Runs inside the peer venv: stub the one module whose import needs torchvision, then the wheel's CLI.
RUNNER = '''
import sys, types
stub = types.ModuleType("sglang.srt.disaggregation.utils")
stub.FAKE_BOOTSTRAP_HOST = "2.2.2.2"
sys.modules["sglang.srt.disaggregation.utils"] = stub
from sglang.benchmark.serving import cli_main
sys.argv = ["sglang.benchmark.serving", *sys.argv[1:]]
cli_main()
'''

TOKENIZER_WRITER = '''
import json, sys
from pathlib import Path
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
words = json.loads(sys.argv[2])
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
for w in words:
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
# Whitespace runs are tokens too: a whitespace-only stream chunk must count as at least one token
# (bench_serving divides each chunk's gap by the chunk's token count).
tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\\s+|\\S+"), behavior="isolated")
tok.save(str(out / "tokenizer.json"))
(out / "tokenizer_config.json").write_text(json.dumps({
    "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
    "eos_token": "</s>", "model_max_length": 1048576}))
'''


def run_logged(cmd: list[str], log: Path, timeout: float) -> int:
    with log.open("ab") as fh:
        return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode


def ensure_peer(venv: Path, *, build: bool) -> str | None:
    """``None`` when the peer imports in ``venv``; otherwise exactly why it cannot run here."""
    py = venv / "bin" / "python"
    log = venv.parent / f"{venv.name}.build.log"
    if not py.exists():
        if not build:
            return f"no peer venv at {venv} and --no-build was given"
        venv.parent.mkdir(parents=True, exist_ok=True)
        print(f"building the peer venv at {venv} (log: {log}) ...", flush=True)
        rc = run_logged(["bash", str(REPO / "patches/tools/make-cpu-venv.sh"), str(venv)], log, 1800)
        if rc != 0:
            return f"patches/tools/make-cpu-venv.sh failed (exit {rc}); see {log}"
        rc = run_logged([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEER_PINS], log, 1800)
        if rc != 0:
            return f"pip install {' '.join(PEER_PINS)} failed (exit {rc}); see {log}"
    probe = subprocess.run([str(py), "-c", RUNNER.replace("cli_main()", "print('peer import ok')")],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0:
        tail = (probe.stderr or probe.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return f"sglang.benchmark.serving does not import in {venv}: {tail[0]}"
    return None


def write_dataset(prompt: BuiltPrompt, count: int, path: Path) -> None:
    """The cell's prompts as bench_serving's custom JSONL dataset (the reply turn is unused: output len is fixed)."""
    with path.open("w", encoding="utf-8") as fh:
        for i in range(count):
            row = {"conversations": [{"role": "user", "content": prompt.text(i)},
                                     {"role": "assistant", "content": "unused reply text"}]}
            fh.write(json.dumps(row) + "\n")


async def run_peer(
    session: aiohttp.ClientSession, ep: Endpoint, *, venv: Path, work: Path, args: argparse.Namespace, index: int,
) -> dict[str, Any]:
    why = await flush_cache(session, ep)
    if why:
        print(f"  note: {why}")
    snap0, busy0 = await engine_window(session, ep)
    out = work / f"peer-{index}.jsonl"
    cmd = [
        str(venv / "bin" / "python"), str(work / "peer_runner.py"),
        "--backend", "sglang-oai-chat", "--base-url", ep.base_url, "--model", "default",
        "--tokenizer", str(work / "tokenizer"), "--dataset-name", "custom",
        "--dataset-path", str(work / "prompts.jsonl"), "--num-prompts", str(args.requests),
        "--sharegpt-output-len", str(args.max_tokens), "--max-concurrency", str(args.concurrency),
        "--request-rate", "inf", "--warmup-requests", "0", "--disable-tqdm", "--seed", str(index),
        "--output-file", str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                env=env, preexec_fn=lambda: pin(0, 1) and None)
    output, _ = await proc.communicate()
    snap1, busy1 = await engine_window(session, ep)
    if proc.returncode != 0 or not out.exists():
        tail = output.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"bench_serving exited {proc.returncode}: " + " | ".join(tail))
    res = json.loads(out.read_text().strip().splitlines()[-1])
    delta = counters.delta(snap0, snap1)
    busy = (busy1 - busy0) if busy0 is not None and busy1 is not None else None
    engine_tps = delta.generation_tokens / busy if busy and delta.generation_tokens else None
    tps = float(res["output_throughput"])
    return {
        "client_tps": tps,
        "engine_tps": engine_tps,
        "ratio": tps / engine_tps if engine_tps else None,
        "client_tokens": res["total_output_tokens"],
        "engine_tokens": delta.generation_tokens,
        "completed": res["completed"],
        "duration_s": res["duration"],
        "ttft_ms_p50": res["median_ttft_ms"],
        "itl_ms_p50": res["median_itl_ms"],
        "accept_length_reported": res.get("accept_length"),
    }


async def compare(args: argparse.Namespace, url: str, venv: Path, work: Path) -> dict[str, list[dict[str, Any]]]:
    ep = Endpoint(url)
    rows: dict[str, list[dict[str, Any]]] = {"repro_py.bench": [], "sglang bench_serving": []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency + 8)) as session:
        prompt = await prepare(session, ep, args.context, args.concurrency)
        write_dataset(prompt, args.requests, work / "prompts.jsonl")
        words = sorted({w for i in range(args.requests) for w in prompt.text(i).split()})
        writer = await asyncio.create_subprocess_exec(
            str(venv / "bin" / "python"), "-c", TOKENIZER_WRITER, str(work / "tokenizer"), json.dumps(words))
        if await writer.wait() != 0:
            raise RuntimeError("writing the peer's tokenizer failed")
        (work / "peer_runner.py").write_text(RUNNER, encoding="utf-8")
        for i in range(args.repeats):
            mine = await measure_repeat(session, ep, prompt, concurrency=args.concurrency, requests=args.requests,
                                        max_tokens=args.max_tokens)
            rows["repro_py.bench"].append(mine)
            peer = await run_peer(session, ep, venv=venv, work=work, args=args, index=i)
            rows["sglang bench_serving"].append(peer)
            print(f"  run {i}: repro_py.bench {mine['client_tps']:.1f} tok/s (engine {mine['engine_tps']:.1f}), "
                  f"bench_serving {peer['client_tps']:.1f} tok/s (engine {peer['engine_tps']:.1f}, "
                  f"{peer['completed']}/{args.requests} completed)", flush=True)
    return rows


def med(rows: list[dict[str, Any]], key: str) -> float | None:
    return stats.median([float(r[key]) for r in rows if r.get(key) is not None])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim-speed", type=float, default=4.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--max-tokens", type=int, default=512)
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--no-build", action="store_true", help="do not build the peer venv when it is missing")
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
        eng, engine_cpu = start_pinned_engine(args.sim_speed, work / "models")
        try:
            print(f"engine pid {eng.pid} ({engine_cpu}); clients on {client_cpu}; SIMULATED engine, "
                  f"sim_speed={args.sim_speed:g}; peer: sglang.benchmark.serving 0.5.23 from {venv}")
            print(f"cell: context {args.context}, concurrency {args.concurrency}, {args.requests} requests x "
                  f"max_tokens {args.max_tokens} (ignore_eos, temperature 0, streaming chat), {args.repeats} runs each")
            rows = asyncio.run(compare(args, eng.url, venv, work))
        except RuntimeError as exc:
            print(f"PEER FAILED: {exc}")
            return 1
        finally:
            eng.stop()
    summary = {
        name: {k: med(r, k) for k in ("client_tps", "engine_tps", "ratio", "ttft_ms_p50", "itl_ms_p50")}
        for name, r in rows.items()
    }
    for name, s in summary.items():
        print(f"median {name:22s}: {s['client_tps']:.1f} tok/s | engine counter {s['engine_tps']:.1f} tok/s | "
              f"client/engine {s['ratio']:.4f} | TTFT p50 {s['ttft_ms_p50']:.1f} ms | ITL p50 {s['itl_ms_p50']:.2f} ms")
    a, b = summary["repro_py.bench"]["client_tps"], summary["sglang bench_serving"]["client_tps"]
    if a and b:
        print(f"ratio repro_py.bench / bench_serving (aggregate output tok/s): {a / b:.4f} "
              f"(sim_speed {args.sim_speed:g})")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": rows,
                                         "median": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
