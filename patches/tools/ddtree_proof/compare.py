"""The concurrent client, the token-stream comparison, the accepts it observed and the result table."""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import urllib.request
from typing import Any


async def _one(session: Any, url: str, ids: list[int], max_new_tokens: int, timeout_s: float) -> dict[str, Any]:
    import aiohttp

    body = {
        "input_ids": ids,
        "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
    }
    async with session.post(url + "/generate", json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        text = await resp.text()
        if resp.status != 200:
            return {"error": f"HTTP {resp.status}: {' '.join(text.split())[:300]}"}
        reply = json.loads(text)
    ids_out = reply.get("output_ids")
    if not isinstance(ids_out, list):
        return {"error": f"no output_ids in {text[:200]}"}
    return {"output_ids": [int(t) for t in ids_out], "meta": reply.get("meta_info") or {}}


async def generate_all(
    url: str, prompts: list[list[int]], *, max_new_tokens: int, timeout_s: float
) -> list[dict[str, Any]]:
    """Every prompt at once (the server queues beyond --max-running-requests)."""
    import aiohttp

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        tasks = [_one(session, url, p, max_new_tokens, timeout_s) for p in prompts]
        results = await asyncio.gather(*tasks, return_exceptions=True)
    return [r if isinstance(r, dict) else {"error": f"{type(r).__name__}: {r}"} for r in results]


def generate(url: str, prompts: list[list[int]], *, max_new_tokens: int, timeout_s: float) -> list[dict[str, Any]]:
    return asyncio.run(generate_all(url, prompts, max_new_tokens=max_new_tokens, timeout_s=timeout_s))


def wait_ready(url: str, *, timeout_s: float, alive: Any) -> None:
    """Until /health answers 200 (``alive()`` False: the process died, raise)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError("the server process exited before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{url} not ready within {timeout_s:.0f} s")


@dataclasses.dataclass
class Row:
    label: str
    block: int | None
    budget: int | None
    overlap: bool
    prompts: int = 0
    identical: int = 0
    errors: int = 0
    first_mismatch: str | None = None
    accept_length: float | None = None
    accepts_by_depth: dict[int, int] = dataclasses.field(default_factory=dict)
    expected_deep: int | None = None
    min_deep: int = 0  # a DDTree row must see at least this many accepts of depth >= 2
    retractions: int = 0
    need_retraction: bool = False  # on a GPU the forced retraction must have happened
    invariant_breaches: int = 0
    server_problems: list[str] = dataclasses.field(default_factory=list)
    wall_s: float = 0.0
    not_run: str | None = None

    @property
    def deep_accepts(self) -> int:
        return sum(n for d, n in self.accepts_by_depth.items() if d >= 2)

    @property
    def ok(self) -> bool:
        return (
            self.not_run is None
            and self.prompts > 0
            and self.identical == self.prompts
            and self.errors == 0
            and self.invariant_breaches == 0
            and not self.server_problems
            and (self.block is None or self.deep_accepts >= self.min_deep)
            and (not self.need_retraction or self.retractions > 0)
        )


def compare(row: Row, reference: list[dict[str, Any]], observed: list[dict[str, Any]], max_new_tokens: int) -> Row:
    row.prompts = len(observed)
    accepts = []
    for i, (ref, got) in enumerate(zip(reference, observed, strict=True)):
        if "error" in got:
            row.errors += 1
            row.first_mismatch = row.first_mismatch or f"prompt {i}: {got['error']}"
            continue
        ref_ids, ids = ref.get("output_ids"), got["output_ids"]
        if ids == ref_ids and len(ids) == max_new_tokens:
            row.identical += 1
        elif row.first_mismatch is None:
            at = next((j for j, (a, b) in enumerate(zip(ref_ids or [], ids, strict=False)) if a != b),
                      min(len(ref_ids or []), len(ids)))  # fmt: skip
            row.first_mismatch = f"prompt {i} token {at}"
        meta = got["meta"]
        acc = meta.get("spec_accept_length")
        if isinstance(acc, int | float):
            accepts.append(float(acc))
        for depth, n in enumerate(meta.get("spec_correct_drafts_histogram") or []):
            row.accepts_by_depth[depth] = row.accepts_by_depth.get(depth, 0) + int(n)
        row.retractions += int(meta.get("num_retractions") or 0)
    row.accept_length = sum(accepts) / len(accepts) if accepts else None
    row.accepts_by_depth = dict(sorted(row.accepts_by_depth.items()))
    return row


LOG_BREACH = "DDTree KV window overrun"
LOG_PROBLEMS = (
    "Traceback (most recent call last)", "RuntimeError", "AssertionError", "CUDA error", "out of memory",
    "device-side assert",
)  # fmt: skip


def scan_log(row: Row, log: str) -> Row:
    row.invariant_breaches = log.count(LOG_BREACH)
    for marker in LOG_PROBLEMS:
        if marker in log:
            line = next((ln for ln in log.splitlines() if marker in ln), marker)
            row.server_problems.append(line.strip()[:200])
    return row


def table(rows: list[Row], baseline: Row) -> str:
    head = (
        "| config | B | budget | D | overlap | prompts | identical to baseline | first mismatch | mean accept len "
        "| accepts by depth | depth >= 2 (expected) | retractions | invariant breaches | server problems | wall s "
        "| result |\n"
        "|---|---:|---:|---:|---|---:|---:|---|---:|---|---:|---:|---:|---|---:|---|"
    )
    lines = [head]
    for r in [baseline, *rows]:
        d = "" if r.budget is None else str(r.budget + 1)
        acc = "" if r.accept_length is None else f"{r.accept_length:.2f}"
        deep = "" if r.block is None else f"{r.deep_accepts} ({'' if r.expected_deep is None else r.expected_deep})"
        result = "PASS" if r.ok else ("NOT RUN: " + r.not_run if r.not_run else "FAIL")
        lines.append(
            f"| {r.label} | {r.block or ''} | {r.budget or ''} | {d} | {'on' if r.overlap else 'off'} | {r.prompts} "
            f"| {r.identical} | {r.first_mismatch or ''} | {acc} | {r.accepts_by_depth or ''} | {deep} "
            f"| {r.retractions} | {r.invariant_breaches} | {'; '.join(r.server_problems)} | {r.wall_s:.0f} | {result} |"
        )
    return "\n".join(lines)
