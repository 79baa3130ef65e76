"""Tiny models for the DDTree losslessness proof, built locally (no download).

- a tokenizer: byte-level BPE trained on a fixed in-memory corpus (``tokenizers``),
  saved as a ``PreTrainedTokenizerFast`` with bos/eos/pad and the DFlash mask token;
- a target: ``LlamaForCausalLM`` (4 layers, hidden 256, GQA 4/2 heads, head dim 64)
  whose weights are built (``construct``): over a 48-token working vocabulary its
  greedy choice follows a fixed permutation except where the previous token tips it
  (about 1 choice in 10), so its output depends on the KV of the position before;
- DFlash drafters, one per block size: ``DFlashDraftModel`` (one layer, the target's
  hidden size, 4 heads, 4 KV heads), built from the target's embedding table so that
  its first choice at depths 1..4 is the target's continuation while nothing tips it:
  accepts of depth >= 2 happen on most verify steps (``draft_sim`` computes how many).

Losslessness must hold whatever the drafter proposes; a drafter that agrees often
makes the proof exercise what only deep accepts reach (multi-node KV moves, the
draft-KV write-back of accepted paths, the largest overlap lag).
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from . import construct as K
from .draft_sim import DraftSim

HIDDEN = K.HIDDEN
LAYERS = 4
HEADS = K.HEADS
KV_HEADS = 2  # the target's
DRAFT_KV_HEADS = K.HEADS  # the drafter's: one value head per predicted depth
HEAD_DIM = K.HEAD_DIM
INTERMEDIATE = 512
VOCAB_TARGET = 512  # BPE merges stop here; specials come on top
CONTEXT = 4096
TARGET_LAYER_IDS = [1, 2]  # target layers whose hidden states feed the drafter (projected to zero here)
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


def construction(tok: Any) -> K.Construction:
    ids = _ids(tok)
    return K.build(len(tok), ids["<|MASK|>"], [ids[n] for n in SPECIALS])


def build_target(dest: Path, tok: Any, con: K.Construction, *, dtype: str) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    ids = _ids(tok)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=ids["<|bos|>"], eos_token_id=ids["<|eos|>"],
        pad_token_id=ids["<|pad|>"], torch_dtype=dtype, rope_theta=K.ROPE_THETA,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0 if name.endswith("norm.weight") else 0.0)
        model.model.embed_tokens.weight.copy_(con.embed)
        model.lm_head.weight.copy_(con.lm_head)
        attn = model.model.layers[0].self_attn
        for name, w in con.target_layer0.items():
            getattr(attn, name).weight.copy_(w)
    model.to(getattr(torch, dtype)).save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)


def drafter_parameters(block: int) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every weight sglang's DFlashDraftModel loads for this config (one layer)."""
    q, kv = HEADS * HEAD_DIM, DRAFT_KV_HEADS * HEAD_DIM
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
        "num_key_value_heads": DRAFT_KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": len(tok),
        "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": K.ROPE_THETA,
        "tie_word_embeddings": False, "torch_dtype": dtype, "block_size": block,
        "bos_token_id": ids["<|bos|>"], "eos_token_id": ids["<|eos|>"],
        "dflash_config": {"target_layer_ids": TARGET_LAYER_IDS, "num_target_layers": LAYERS,
                          "mask_token": "<|MASK|>", "mask_token_id": ids["<|MASK|>"]},
    }  # fmt: skip


def build_drafter(dest: Path, block: int, tok: Any, con: K.Construction, *, dtype: str) -> None:
    import torch
    from safetensors.torch import save_file

    dest.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, shape in drafter_parameters(block).items():
        t = con.drafter.get(name)
        if t is None:  # norms 1; MLP and the context projection zero
            t = torch.ones(shape) if name.endswith("norm.weight") else torch.zeros(shape)
        assert tuple(t.shape) == shape, (name, t.shape, shape)
        tensors[name] = t.to(getattr(torch, dtype)).contiguous()
    save_file(tensors, str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(drafter_config(block, tok, dtype=dtype), indent=2))
    tok.save_pretrained(dest)


def build_all(root: Path, blocks: list[int], *, dtype: str) -> dict[str, Path]:
    """Build the tokenizer, the target and one drafter per block size under root."""
    root.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(root / "tokenizer")
    con = construction(tok)
    paths = {"tokenizer": root / "tokenizer", "target": root / "target"}
    build_target(paths["target"], tok, con, dtype=dtype)
    for block in blocks:
        paths[f"drafter-b{block}"] = root / f"drafter-b{block}"
        build_drafter(paths[f"drafter-b{block}"], block, tok, con, dtype=dtype)
    (root / "working_vocabulary.json").write_text(json.dumps({"tokens": con.s_tokens, "pi": con.pi}))
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
    vocab = working_vocabulary(paths)
    s_tokens, pi = vocab["tokens"], vocab["pi"]
    model = AutoModelForCausalLM.from_pretrained(paths["target"], torch_dtype=torch.float32).eval()
    with torch.no_grad():  # every (previous, current) pair of the working vocabulary, after a filler
        batch = torch.tensor([[s_tokens[0], p, c] for p in s_tokens for c in s_tokens])
        pred = model(batch).logits[:, -1].argmax(-1).view(len(s_tokens), len(s_tokens))
    follows = pred == torch.tensor([pi[c] for c in s_tokens])[None, :]
    on_chain = sum(bool(follows[s_tokens.index(p), s_tokens.index(pi[p])]) for p in s_tokens) / len(s_tokens)
    assert set(pred.flatten().tolist()) <= set(s_tokens), "the target left its working vocabulary"
    assert 0.8 <= on_chain < 1.0, f"the target follows its chain on {on_chain:.0%} of steps (80-99% wanted)"
    done.append(
        f"target: LlamaForCausalLM loads (transformers); follows its chain on {on_chain:.0%} of steps, the "
        f"previous token tips {1 - float(follows.float().mean()):.0%} of random (previous, current) pairs"
    )
    for block in blocks:
        path = paths[f"drafter-b{block}"]
        cfg = parse_dflash_draft_config(draft_hf_config=AutoConfig.from_pretrained(path))
        assert cfg.resolve_block_size() == block and cfg.target_layer_ids == TARGET_LAYER_IDS, cfg
        assert cfg.mask_token_id == tok.convert_tokens_to_ids("<|MASK|>")
        with safe_open(str(path / "model.safetensors"), "pt") as f:
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
        assert shapes == drafter_parameters(block), "drafter weights differ from DFlashDraftModel's layout"
        sim = DraftSim(path, paths["target"])
        agree = sum(
            int(sim.topk(s, 4)[1][d - 1, 0]) == _chain(pi, s, d) for s in s_tokens for d in range(1, K.DRAFT_DEPTHS + 1)
        )
        total = len(s_tokens) * K.DRAFT_DEPTHS
        assert agree == total, f"drafter B={block}: first choice follows the chain at {agree}/{total} (root, depth)"
        done.append(
            f"drafter B={block}: sglang parse_dflash_draft_config ok, {len(shapes)} weights in layout; first choice = "
            f"the target's chain at depths 1-{K.DRAFT_DEPTHS} for all {len(s_tokens)} roots (draft forward on CPU)"
        )
    return done


def working_vocabulary(paths: dict[str, Path]) -> dict[str, Any]:
    raw = json.loads((paths["target"].parent / "working_vocabulary.json").read_text())
    return {"tokens": raw["tokens"], "pi": {int(k): int(v) for k, v in raw["pi"].items()}}


def _chain(pi: dict[int, int], s: int, n: int) -> int:
    for _ in range(n):
        s = pi[s]
    return s
