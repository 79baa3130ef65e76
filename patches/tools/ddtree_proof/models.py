"""Tiny random-weight models for the DDTree losslessness proof, built locally (no download).

- a tokenizer: byte-level BPE trained on a fixed in-memory corpus (``tokenizers``),
  saved as a ``PreTrainedTokenizerFast`` with bos/eos/pad and the DFlash mask token;
- a target: ``LlamaForCausalLM`` (4 layers, hidden 256, GQA 4/2 heads, head dim 64)
  with random weights and a wide LM head, so greedy choices are far apart
  (no near-ties for float noise to flip);
- DFlash drafters, one per block size: ``DFlashDraftModel`` (one layer, the
  target's hidden size; ``fc`` projects target layers 1 and 2), random weights,
  in the parameter layout sglang's ``models/dflash.py`` loads.

Random drafters propose poor trees (low acceptance), which is the point:
losslessness must hold whatever the drafter proposes.
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

HIDDEN = 256
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
INTERMEDIATE = 512
VOCAB_TARGET = 512  # BPE merges stop here; specials come on top
CONTEXT = 4096
TARGET_LAYER_IDS = [1, 2]  # target layers whose hidden states feed the drafter
LM_HEAD_STD = 3.0  # logit std ~ 3 * sqrt(HIDDEN) = 48: greedy argmax gaps far above float noise
SPECIALS = ["<|bos|>", "<|eos|>", "<|pad|>", "<|MASK|>"]


_WORDS = (
    "the of and to in is was for on that with as by at from it an be this are or which his her "
    "model token tree draft verify cache kernel batch window block budget prefix path node depth "
    "river stone garden market winter signal number letter engine station harbor lantern"
)


def _corpus(seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = _WORDS.split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "." for _ in range(4000)]


def build_tokenizer(dest: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|eos|>", pad_token="<|pad|>", mask_token="<|MASK|>"
    )
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    fast.save_pretrained(dest)
    return fast


def _ids(tok: Any) -> dict[str, int]:
    return {name: int(tok.convert_tokens_to_ids(name)) for name in SPECIALS}


def build_target(dest: Path, tok: Any, *, dtype: str, seed: int = 0) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = _ids(tok)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=ids["<|bos|>"], eos_token_id=ids["<|eos|>"],
        pad_token_id=ids["<|pad|>"], torch_dtype=dtype,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, LM_HEAD_STD)
    model.to(getattr(torch, dtype)).save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)


def drafter_parameters(block: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight sglang's DFlashDraftModel loads for this config (one layer)."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    layer = {
        "input_layernorm.weight": (HIDDEN,), "post_attention_layernorm.weight": (HIDDEN,),
        "self_attn.q_proj.weight": (q, HIDDEN), "self_attn.k_proj.weight": (kv, HIDDEN),
        "self_attn.v_proj.weight": (kv, HIDDEN), "self_attn.o_proj.weight": (HIDDEN, q),
        "self_attn.q_norm.weight": (HEAD_DIM,), "self_attn.k_norm.weight": (HEAD_DIM,),
        "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN), "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
        "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
    }  # fmt: skip
    out = {f"layers.0.{k}": v for k, v in layer.items()}
    out.update({"norm.weight": (HIDDEN,), "hidden_norm.weight": (HIDDEN,),
                "fc.weight": (HIDDEN, len(TARGET_LAYER_IDS) * HIDDEN)})  # fmt: skip
    return out


def drafter_config(block: int, tok: Any, *, dtype: str) -> dict[str, Any]:
    ids = _ids(tok)
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "llama", "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": len(tok),
        "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": dtype, "block_size": block,
        "bos_token_id": ids["<|bos|>"], "eos_token_id": ids["<|eos|>"],
        "dflash_config": {"target_layer_ids": TARGET_LAYER_IDS, "num_target_layers": LAYERS,
                          "mask_token": "<|MASK|>", "mask_token_id": ids["<|MASK|>"]},
    }  # fmt: skip


def build_drafter(dest: Path, block: int, tok: Any, *, dtype: str, seed: int = 1) -> None:
    import torch
    from safetensors.torch import save_file

    dest.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed + block)
    tensors = {}
    for name, shape in drafter_parameters(block).items():
        norm = name.endswith("norm.weight")
        t = torch.ones(shape) if norm else torch.randn(shape, generator=gen) / shape[-1] ** 0.5
        tensors[name] = t.to(getattr(torch, dtype)).contiguous()
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(drafter_config(block, tok, dtype=dtype), indent=2))
    tok.save_pretrained(dest)


def build_all(root: Path, blocks: list[int], *, dtype: str) -> dict[str, Path]:
    """Build the tokenizer, the target and one drafter per block size under root."""
    root.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(root / "tokenizer")
    paths = {"tokenizer": root / "tokenizer", "target": root / "target"}
    build_target(paths["target"], tok, dtype=dtype)
    for block in blocks:
        paths[f"drafter-b{block}"] = root / f"drafter-b{block}"
        build_drafter(paths[f"drafter-b{block}"], block, tok, dtype=dtype)
    return paths


def validate(paths: dict[str, Path], blocks: list[int]) -> list[str]:
    """Load everything with transformers / safetensors / sglang's DFlash config parser (CPU).
    Returns what was checked; raises on any problem."""
    import torch
    from safetensors import safe_open
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    done = []
    tok = AutoTokenizer.from_pretrained(paths["tokenizer"])
    text = "the river model verify budget."
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text, "tokenizer does not round-trip"
    assert tok.convert_tokens_to_ids("<|MASK|>") != tok.unk_token_id
    done.append(f"tokenizer: {len(tok)} tokens, round-trips, mask token id {tok.convert_tokens_to_ids('<|MASK|>')}")
    model = AutoModelForCausalLM.from_pretrained(paths["target"], torch_dtype=torch.float32)
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)])
    with torch.no_grad():
        logits = model(ids).logits[0, -1]
    top2 = torch.topk(logits, 2).values
    done.append(f"target: LlamaForCausalLM loads (transformers), logits top-2 gap {float(top2[0] - top2[1]):.2f}")
    for block in blocks:
        path = paths[f"drafter-b{block}"]
        cfg = parse_dflash_draft_config(draft_hf_config=AutoConfig.from_pretrained(path))
        assert cfg.resolve_block_size() == block and cfg.target_layer_ids == TARGET_LAYER_IDS, cfg
        assert cfg.mask_token_id == tok.convert_tokens_to_ids("<|MASK|>")
        with safe_open(str(path / "model.safetensors"), "pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
        assert shapes == drafter_parameters(block), "drafter weights differ from DFlashDraftModel's layout"
        done.append(f"drafter B={block}: sglang parse_dflash_draft_config ok, {len(shapes)} weights in layout")
    return done
