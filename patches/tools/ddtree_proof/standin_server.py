"""CPU stand-in for the proof's servers (dry run only): /health, /server_info, /generate.

Greedy decoding of the tiny target with transformers on CPU, one request at a
time (a lock), so the proof's client, comparison and table run end to end
without a GPU. It is not sglang and proves nothing about the series; it
proves the proof script. ``--fault concurrent-corruption`` flips one output
token of a request whenever another request is in flight: the class of bug
the proof exists to catch, which its comparison must report.

Usage: standin_server.py --model-path DIR --port N [--fault concurrent-corruption]
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import argparse
import asyncio
import threading
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fault", choices=["concurrent-corruption"])
    args = ap.parse_args()

    import torch
    from aiohttp import web
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(args.model_path, torch_dtype=torch.float32).eval()
    lock = threading.Lock()
    in_flight = {"n": 0}

    def greedy(ids: list[int], n: int) -> list[int]:
        with lock, torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            past, produced = out.past_key_values, []
            tok = int(out.logits[0, -1].argmax())
            for _ in range(n):
                produced.append(tok)
                if len(produced) == n:
                    break
                out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, int(out.logits[0, -1].argmax())
            return produced

    async def generate(request: Any) -> Any:
        body = await request.json()
        sp = body.get("sampling_params") or {}
        if float(sp.get("temperature", 1.0)) != 0.0:
            return web.json_response({"error": {"message": "stand-in serves temperature 0 only"}}, status=400)
        in_flight["n"] += 1
        try:
            concurrent = in_flight["n"] > 1
            ids = await asyncio.get_running_loop().run_in_executor(
                None, greedy, list(body["input_ids"]), int(sp.get("max_new_tokens", 16))
            )
        finally:
            in_flight["n"] -= 1
        if args.fault == "concurrent-corruption" and concurrent and ids:
            ids[len(ids) // 2] = (ids[len(ids) // 2] + 1) % model.config.vocab_size
        return web.json_response({"output_ids": ids, "meta_info": {"completion_tokens": len(ids)}})

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
