"""The target's greedy continuations on CPU (transformers, fp32, KV cache): the streams
every server's output must equal, and what the plan's expectations are computed over."""

# ruff: noqa: PLC0415 -- torch/transformers come from the venv at run time

from __future__ import annotations

from pathlib import Path
from typing import Any


def load(path: Path | str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def greedy(model: Any, ids: list[int], n: int) -> list[int]:
    import torch

    with torch.no_grad():
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


def streams(target: Path, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    model = load(target)
    return [greedy(model, p, max_new_tokens) for p in prompts]
