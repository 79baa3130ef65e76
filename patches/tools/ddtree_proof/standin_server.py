"""CPU stand-in for the proof's servers (dry run only): /health, /server_info, /generate.

Greedy decoding of the tiny target with transformers on CPU, one request at a
time (a lock), so the proof's client, comparison and table run end to end
without a GPU. Sampled requests (temperature > 0; the sampled part, batched
input_ids) are sampled token by token from the model's distribution filtered as
sglang's plain sampler filters it (sampled.py), for the baseline and the DDTree
stand-in alike. Given a drafter (``--drafter --budget --topk``) it also reports
the accepts by depth DDTree would have on that request (``draft_sim``, in
sglang's ``meta_info.spec_correct_drafts_histogram`` shape). It is not sglang
and proves nothing about the series; it proves the proof script.
``--fault concurrent-corruption`` flips one output token of a request whenever
another request is in flight: the class of bug the proof exists to catch,
which its comparison must report. ``--fault sampled-greedy`` answers sampled
requests with the greedy continuation (what DDTree did before it sampled):
the sampled part's chi-square tests must report it.

Usage: python -m ddtree_proof.standin_server --model-path DIR --port N [--drafter DIR --budget N --topk K]
       [--fault concurrent-corruption|sampled-greedy]
"""

# ruff: noqa: PLC0415 -- torch/aiohttp are imported where used: they come from the CPU venv

from __future__ import annotations

import argparse
import asyncio
import threading
from pathlib import Path
from typing import Any

from . import draft_sim, reference, sampled


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--drafter")
    ap.add_argument("--budget", type=int)
    ap.add_argument("--topk", type=int, default=4)
    ap.add_argument("--fault", choices=["concurrent-corruption", "sampled-greedy"])
    args = ap.parse_args()

    import cpu_import_shims
    from aiohttp import web

    cpu_import_shims.install_torchvision_stand_in()  # sglang's sampler module (sampled.filtered) imports it
    model = reference.load(args.model_path)
    sim = draft_sim.DraftSim(Path(args.drafter), Path(args.model_path)) if args.drafter else None
    lock = threading.Lock()
    in_flight = {"n": 0}

    def serve(ids: list[int], n: int) -> tuple[list[int], list[int] | None]:
        with lock:
            out = reference.greedy(model, ids, n)
            if sim is None:
                return out, None
            exp = draft_sim.expected_accepts(sim, [ids], [out], budget=args.budget, topk=args.topk)
            return out, [exp.accepts_by_depth.get(d, 0) for d in range(max(exp.accepts_by_depth) + 1)]

    import torch

    dists: dict[tuple[float, ...], Any] = {}
    rng = torch.Generator().manual_seed(args.port)

    def sample_one(ids: list[int], n: int, temperature: float) -> list[int]:
        seq = list(ids)
        for _ in range(n):
            key = (temperature, *seq)
            if key not in dists:
                with torch.no_grad():
                    logits = model(torch.tensor([seq])).logits[0, -1].to(torch.float64)
                dists[key] = sampled.filtered(torch.softmax(logits / temperature, -1)[None])[0]
            if args.fault == "sampled-greedy":
                seq.append(int(dists[key].argmax()))
            else:
                seq.append(int(torch.multinomial(dists[key], 1, generator=rng)))
        return seq[len(ids):]

    def serve_sampled(batch: list[list[int]], n: int, temperature: float) -> list[dict[str, Any]]:
        with lock:
            return [{"output_ids": sample_one(ids, n, temperature), "meta_info": {"completion_tokens": n}}
                    for ids in batch]  # fmt: skip

    async def generate(request: Any) -> Any:
        body = await request.json()
        sp = body.get("sampling_params") or {}
        if float(sp.get("temperature", 1.0)) != 0.0:
            if int(sp.get("top_k", -1)) != sampled.TOP_K or float(sp.get("top_p", 1.0)) != sampled.TOP_P:
                return web.json_response({"error": {"message": "stand-in samples with the sampled part's top_k/top_p"}},
                                         status=400)  # fmt: skip
            batch = body["input_ids"] if body["input_ids"] and isinstance(body["input_ids"][0], list) else [
                body["input_ids"]]
            replies = await asyncio.get_running_loop().run_in_executor(
                None, serve_sampled, batch, int(sp.get("max_new_tokens", 16)), float(sp["temperature"])
            )
            return web.json_response(replies if isinstance(body["input_ids"][0], list) else replies[0])
        in_flight["n"] += 1
        try:
            concurrent = in_flight["n"] > 1
            ids, histogram = await asyncio.get_running_loop().run_in_executor(
                None, serve, list(body["input_ids"]), int(sp.get("max_new_tokens", 16))
            )
        finally:
            in_flight["n"] -= 1
        if args.fault == "concurrent-corruption" and concurrent and ids:
            ids[len(ids) // 2] = (ids[len(ids) // 2] + 1) % model.config.vocab_size
        meta: dict[str, Any] = {"completion_tokens": len(ids), "num_retractions": 0}
        if histogram is not None:
            meta["spec_correct_drafts_histogram"] = histogram
        return web.json_response({"output_ids": ids, "meta_info": meta})

    async def health(_: Any) -> Any:
        return web.Response(text="ok")

    async def server_info(_: Any) -> Any:
        return web.json_response({"standin": True, "model_path": args.model_path, "fault": args.fault})

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/health", health)
    app.router.add_get("/server_info", server_info)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
