"""The proof's sampled part: DDTree's target-only tree sampling against plain sampling, in distribution.

The greedy target is almost deterministic (its chain token has p ~ 1), so sampling
from it would prove nothing. ``soften`` writes a copy whose LM head is scaled by
SOFT_SCALE (every argmax, hence the chain and the drafter's proposals, unchanged)
and whose rows outside the working vocabulary point against the dimension every
hidden state shares (no mass there): over the working vocabulary its next-token
distributions are spread. Two servers serve it: the baseline (no speculative
decoding) and DDTree (B 8, budget 16, overlap scheduling: sglang's default),
without deterministic inference (the coins are torch.rand). Each gets SAMPLES
requests per prompt and temperature (0.6 and 1.0; top_p 0.9 and top_k 4, so that
N_TOKENS = 4 tokens have a few hundred sequences at most), N_TOKENS new tokens
each (ignore_eos). Per prompt and temperature, chi-square at ALPHA: DDTree
against the exact distribution (enumerated on the CPU with transformers and
sglang's plain sampler's filter), the baseline against it (the reference
itself), DDTree against the baseline. On a GPU this runs sglang's kernel
(tree_speculative_sampling_target_only, JIT-built at the first sampled
request) inside the patched worker under overlap scheduling and CUDA graphs.
"""

# ruff: noqa: PLC0415 -- torch/aiohttp/sglang are imported where used: they come from the venv at run time

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

from . import chisquare as X

SOFT_SCALE = 0.07  # LM head scale of the sampled target
OFF_VOCAB_LOGIT = -30.0  # weight of the shared dimension in the rows outside the working vocabulary
TEMPERATURES = (0.6, 1.0)
TOP_P, TOP_K = 0.9, 4
N_TOKENS = 4
SAMPLES = 10_000  # per prompt and temperature: 20,000 per temperature over the two prompts
ALPHA = 1e-4  # per test; 12 tests on a correct server pair: false alarm <= 1.2e-3 (Bonferroni)
SHAPE = (8, 16)  # block, budget of the sampled DDTree server
MAX_RUNNING = 256
CHUNK = 250  # requests per /generate call
MIN_ACCEPT = 1.2  # the DDTree server's mean accept length (tokens per verify step) must reach this


def prompts(vocab: list[int], *, seed: int = 11) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.choice(vocab) for _ in range(n)] for n in (6, 9)]


def soften(target: Path, dest: Path, vocab: list[int]) -> Path:
    """The sampled target: the target's files with its LM head rewritten (see the module doc)."""
    import torch
    from safetensors.torch import load_file, save_file

    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(target, dest)
    weights = load_file(str(dest / "model.safetensors"))
    head = weights["lm_head.weight"].to(torch.float32) * SOFT_SCALE
    off = torch.ones(head.shape[0], dtype=torch.bool)
    off[torch.tensor(vocab)] = False
    head[off] = 0.0
    head[off, 0] = OFF_VOCAB_LOGIT  # dimension 0: the component every embedding shares
    weights["lm_head.weight"] = head.to(weights["lm_head.weight"].dtype).contiguous()
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def filtered(probs: Any) -> Any:
    """sglang's plain sampler's distribution (pytorch backend: top-k and top-p together)."""
    import torch
    from sglang.srt.layers.sampler import top_k_top_p_min_p_sampling_from_probs_torch

    rows = probs.shape[0]
    _ids, kept, order, _w = top_k_top_p_min_p_sampling_from_probs_torch(
        probs.clone(), torch.full((rows,), TOP_K, dtype=torch.int32), torch.full((rows,), TOP_P), torch.zeros(rows),
        False, None, torch.zeros(rows, dtype=torch.int64), return_filtered_probs=True,
    )  # fmt: skip
    out = torch.zeros_like(probs).scatter_(1, order.long(), kept)
    return out / out.sum(-1, keepdim=True)


def exact(model: Any, prompt: list[int], temperature: float) -> dict[tuple[int, ...], float]:
    """{first N_TOKENS tokens: probability} under plain sampling, enumerated on the CPU."""
    import torch

    seqs: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(N_TOKENS):
        items = list(seqs.items())
        with torch.no_grad():
            logits = model(torch.tensor([prompt + list(s) for s, _ in items])).logits[:, -1].to(torch.float64)
        dist = filtered(torch.softmax(logits / temperature, dim=-1))
        seqs = {}
        for (s, p), row in zip(items, dist, strict=True):
            for tok in torch.nonzero(row).flatten().tolist():
                seqs[(*s, tok)] = p * float(row[tok])
    return seqs


def validate(model: Any, greedy_model: Any, prompt_list: list[list[int]]) -> list[str]:
    """The sampled target keeps the greedy target's choices; its distributions are spread."""
    import torch

    lines = []
    for prompt in prompt_list:
        with torch.no_grad():
            soft = model(torch.tensor([prompt])).logits[0, -1]
            sharp = greedy_model(torch.tensor([prompt])).logits[0, -1]
        assert int(soft.argmax()) == int(sharp.argmax()), "the sampled target changed the greedy choice"
        for t in TEMPERATURES:
            p = torch.softmax(soft / t, -1)
            lines.append(f"T={t}: top p {float(p.max()):.2f}, {int((p > 0.01).sum())} tokens above 1%")
    return [f"sampled target (LM head x {SOFT_SCALE}): greedy choices unchanged; " + "; ".join(lines)]


async def _batch(session: Any, url: str, prompt: list[int], n: int, *, temperature: float, timeout_s: float) -> list:
    import aiohttp

    body = {
        "input_ids": [prompt] * n,
        "sampling_params": {"temperature": temperature, "top_p": TOP_P, "top_k": TOP_K, "max_new_tokens": N_TOKENS,
                            "ignore_eos": True},
    }  # fmt: skip
    async with session.post(url + "/generate", json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        text = await resp.text()
        if resp.status != 200:
            return [{"error": f"HTTP {resp.status}: {' '.join(text.split())[:300]}"}] * n
    reply = json.loads(text)
    return reply if isinstance(reply, list) else [reply]


async def _sample_all(url: str, jobs: list[tuple[int, float]], prompt_list: list[list[int]], samples: int,
                      timeout_s: float) -> dict[tuple[int, float], list]:  # fmt: skip
    import aiohttp

    sem = asyncio.Semaphore(8)
    out: dict[tuple[int, float], list] = {job: [] for job in jobs}

    async def one(session: Any, job: tuple[int, float], n: int) -> None:
        async with sem:
            out[job].extend(await _batch(session, url, prompt_list[job[0]], n, temperature=job[1], timeout_s=timeout_s))

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [one(session, job, min(CHUNK, samples - i)) for job in jobs for i in range(0, samples, CHUNK)]
        await asyncio.gather(*tasks)
    return out


def sample(url: str, prompt_list: list[list[int]], samples: int, *, timeout_s: float) -> dict[tuple[int, float], list]:
    """{(prompt index, temperature): [reply per request]} from one server."""
    jobs = [(i, t) for i in range(len(prompt_list)) for t in TEMPERATURES]
    return asyncio.run(_sample_all(url, jobs, prompt_list, samples, timeout_s))


@dataclasses.dataclass
class Check:
    prompt: int
    temperature: float
    samples: int = 0
    errors: int = 0
    first_error: str | None = None
    tree_vs_exact: X.Result | None = None
    base_vs_exact: X.Result | None = None
    tree_vs_base: X.Result | None = None
    accept_length: float | None = None  # DDTree's mean tokens per verify step

    @property
    def ok(self) -> bool:
        results = (self.tree_vs_exact, self.base_vs_exact, self.tree_vs_base)
        return self.errors == 0 and all(r is not None and not r.rejects(ALPHA) for r in results)


def _tokens(replies: list, check: Check) -> list[list[int]]:
    rows = []
    for r in replies:
        ids = r.get("output_ids") if isinstance(r, dict) else None
        if not isinstance(ids, list) or len(ids) < N_TOKENS:
            check.errors += 1
            check.first_error = check.first_error or str(r.get("error") if isinstance(r, dict) else r)[:200]
            continue
        rows.append([int(t) for t in ids[:N_TOKENS]])
    return rows


def compare(tree: dict, base: dict, exact_dists: dict) -> list[Check]:
    checks = []
    for (p, t), dist in exact_dists.items():
        c = Check(p, t)
        dd, bb = _tokens(tree.get((p, t), []), c), _tokens(base.get((p, t), []), c)
        c.samples = len(dd)
        if dd and bb:
            c.tree_vs_exact = X.goodness_of_fit(dd, dist)
            c.base_vs_exact = X.goodness_of_fit(bb, dist)
            c.tree_vs_base = X.homogeneity(dd, bb)
        lengths = [r["meta_info"].get("spec_accept_length") for r in tree.get((p, t), [])
                   if isinstance(r, dict) and isinstance(r.get("meta_info"), dict)]  # fmt: skip
        lengths = [float(x) for x in lengths if isinstance(x, int | float)]
        c.accept_length = sum(lengths) / len(lengths) if lengths else None
        checks.append(c)
    return checks


def table(checks: list[Check]) -> str:
    lines = [
        f"Sampled (T, top_p {TOP_P}, top_k {TOP_K}; the first {N_TOKENS} tokens; chi-square, alpha {ALPHA:g} each):",
        "| prompt | T | samples | DDTree vs exact | baseline vs exact | DDTree vs baseline | DDTree accept len "
        "| errors | result |",
        "|---:|---:|---:|---|---|---|---:|---:|---|",
    ]
    for c in checks:
        show = lambda r: "" if r is None else r.describe()  # noqa: E731
        acc = "" if c.accept_length is None else f"{c.accept_length:.2f}"
        lines.append(f"| {c.prompt} | {c.temperature} | {c.samples} | {show(c.tree_vs_exact)} | "
                     f"{show(c.base_vs_exact)} | {show(c.tree_vs_base)} | {acc} | {c.errors} "
                     f"{c.first_error or ''} | {'PASS' if c.ok else 'FAIL'} |")  # fmt: skip
    return "\n".join(lines)


def servers(rows: list) -> str:
    """One line per sampled-part server (compare.Row): ran, how long, what its log showed."""
    out = []
    for r in rows:
        state = f"NOT RUN: {r.not_run}" if r.not_run else f"{r.wall_s:.0f} s of requests"
        problems = "; ".join(r.server_problems) or "none"
        out.append(f"Sampled-part server {r.label}: {state}; invariant breaches {r.invariant_breaches}; "
                   f"server problems: {problems}")  # fmt: skip
    return "\n".join(out)
