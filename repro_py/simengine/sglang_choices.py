"""Choice lists copied from sglang 0.5.23's argument definitions (names only)."""

from __future__ import annotations

# sglang 0.5.23 arg_groups/choices.py ATTENTION_BACKEND_CHOICES
ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "dsa",
    "nsa",
    "qsa",
    "dsv4",
    "compressed",
    "fa3",
    "fa4",
    "flashinfer",
    "llada2_cfg_flashinfer",
    "flashmla",
    "trtllm_mla",
    "cutedsl_mla",
    "tokenspeed_mla",
    "trtllm_mha",
    "hpc_ops",
    "minicpm_flashattn",
    "minicpm_flashinfer",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)
# sglang 0.5.23 arg_groups/choices.py DETERMINISTIC_ATTENTION_BACKEND_CHOICES: the backends
# --enable-deterministic-inference accepts (arg_groups/overrides.py _deterministic_attention_backend)
DETERMINISTIC_ATTENTION_BACKENDS = ("ascend", "fa3", "fa4", "flashinfer", "intel_xpu", "triton")


def deterministic_backend_refusal(backend: str) -> str:
    """sglang 0.5.23's own words refusing ``--enable-deterministic-inference`` with ``backend``."""
    return (
        f"Currently only {list(DETERMINISTIC_ATTENTION_BACKENDS)} attention backends are supported for "
        f"deterministic inference, but you explicitly specified '{backend}'."
    )

# sglang 0.5.23 parser/reasoning_parser_names.py (plus "auto")
REASONING_PARSERS = (
    "auto",
    "apertus2509",
    "beam",
    "deepseek-r1",
    "deepseek-v3",
    "deepseek-v4",
    "deepseek-v41",
    "dots",
    "glm45",
    "ling3",
    "hunyuan",
    "gpt-oss",
    "k2_horizon",
    "kimi",
    "kimi_k2",
    "kimi_k3",
    "mimo",
    "muse",
    "poolside_v1",
    "qwen3",
    "qwen3-thinking",
    "minimax",
    "minimax-append-think",
    "minimax-m3",
    "nanbeige",
    "step3",
    "step3p5",
    "mistral",
    "nemotron_3",
    "granite_thinking_parser",
    "interns1",
    "gemma4",
    "inkling",
    "iquest_q1",
    "cohere_command4",
    "gigachat35",
    "response_template",
)
# sglang 0.5.23 function_call/parser_names.py TOOL_CALL_PARSER_NAMES (plus "auto")
TOOL_CALL_PARSERS = (
    "auto",
    "apertus2509",
    "beam",
    "cohere_command4",
    "deepseekv3",
    "deepseekv31",
    "deepseekv32",
    "deepseekv4",
    "deepseekv41",
    "dots",
    "glm",
    "glm45",
    "glm47",
    "gpt-oss",
    "k2_horizon",
    "kimi_k2",
    "kimi_k3",
    "lfm2",
    "ling3",
    "llama3",
    "mimo",
    "minicpm5",
    "mistral",
    "muse",
    "poolside_v1",
    "pythonic",
    "qwen",
    "qwen25",
    "qwen3_coder",
    "spark25",
    "step3",
    "step3p5",
    "minimax-m2",
    "minimax-m3",
    "nanbeige",
    "trinity",
    "interns1",
    "hermes",
    "hunyuan",
    "gigachat3",
    "gigachat35",
    "gemma4",
    "inkling",
    "iquest_q1",
    "response_template",
)
# sglang 0.5.23 model_executor/cuda_graph_config.py Backend.ALL (--cuda-graph-backend-{decode,prefill})
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")
# Algorithms sglang 0.5.23 knows; the simulated engine serves only the DFLASH family.
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "DDTREE")
