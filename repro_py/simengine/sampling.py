"""sglang 0.5.23's ``SamplingParams`` as the simulated engine builds and checks it: defaults, normalize, verify.

The same steps, order and messages as ``sglang/srt/sampling/sampling_params.py``:
construction (``__post_init__``: ``None`` means the default, an empty grammar
means none, a temperature below 1e-6 means greedy, i.e. temperature 1.0 with
top_k 1, and top_k -1 means the whole vocabulary), ``normalize`` (stop strings:
at most 32; stop_regex: at most 32 patterns of at most 256 bytes) and
``verify`` (ranges, then logit_bias keys, the seed, the request's reasoning
terminator, at most one grammar). Values keep the type the request gave them
(sglang's msgspec struct does not convert): a ``/generate`` temperature of 1 is
reported as ``1``, a chat one (pydantic made it a float) as ``1.0``.

Also the OpenAI routes' conversion into these parameters
(``ChatCompletionRequest.to_sampling_params`` and
``OpenAIServingCompletion._build_sampling_params``) for the fields the engine
models. ``tests/simengine/test_request_parity.py`` checks all of it against
sglang's own code.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

SAMPLING_EPS = 1e-6
TOP_K_ALL = 1 << 30
MAX_STOP_COUNT = 32
MAX_STOP_REGEX_LEN = 256
MAX_STOP_REGEX_COUNT = 32
REASONING_END_KEY = "__sglang_reasoning_end_token_ids"
MAX_REASONING_END_IDS = 32
_GRAMMARS = ("json_schema", "regex", "ebnf", "structural_tag")
# SamplingParams fields whose None means "the default"
_NONE_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
    "repetition_penalty": 1.0, "min_new_tokens": 0, "n": 1, "ignore_eos": False,
}  # fmt: skip


@dataclasses.dataclass
class SamplingParams:
    """The fields of sglang's SamplingParams the engine and its checks read (the others are not modelled)."""

    max_new_tokens: Any = 128
    stop: Any = None
    stop_regex: Any = None
    temperature: Any = 1.0
    top_p: Any = 1.0
    top_k: Any = TOP_K_ALL
    min_p: Any = 0.0
    frequency_penalty: Any = 0.0
    presence_penalty: Any = 0.0
    repetition_penalty: Any = 1.0
    min_new_tokens: Any = 0
    n: Any = 1
    beam_width: Any = None
    json_schema: Any = None
    regex: Any = None
    ebnf: Any = None
    structural_tag: Any = None
    ignore_eos: Any = False
    logit_bias: Any = None
    sampling_seed: Any = None
    custom_params: Any = None
    watermark: Any = None
    stop_strs: list[str] = dataclasses.field(default_factory=list)

    @classmethod
    def build(cls, kwargs: dict[str, Any]) -> SamplingParams:
        """``SamplingParams(**kwargs)`` with its ``__post_init__``; keys it does not model are ignored."""
        known = {f.name for f in dataclasses.fields(cls)} - {"stop_strs"}
        sp = cls(**{k: v for k, v in kwargs.items() if k in known})
        for name, default in _NONE_DEFAULTS.items():
            if getattr(sp, name) is None:
                setattr(sp, name, default)
        for name in _GRAMMARS:
            setattr(sp, name, getattr(sp, name) or None)
        if 0 <= sp.temperature < SAMPLING_EPS:
            sp.temperature = 1.0
            sp.top_k = 1
        if sp.top_k == -1:
            sp.top_k = TOP_K_ALL
        return sp

    @property
    def greedy(self) -> bool:
        return bool(self.top_k == 1)

    def normalize(self) -> None:
        if self.stop is not None:
            stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
            if len(stops) > MAX_STOP_COUNT:
                raise ValueError(f"at most {MAX_STOP_COUNT} stop strings are allowed, got {len(stops)}")
            self.stop_strs = stops
        if self.stop_regex is not None:
            patterns = [self.stop_regex] if isinstance(self.stop_regex, str) else list(self.stop_regex)
            if len(patterns) > MAX_STOP_REGEX_COUNT:
                raise ValueError(
                    f"at most {MAX_STOP_REGEX_COUNT} stop_regex patterns are allowed, got {len(patterns)}"
                )
            for pattern in patterns:
                size = len(pattern.encode("utf-8"))
                if size > MAX_STOP_REGEX_LEN:
                    raise ValueError(f"stop_regex is {size} bytes, over the {MAX_STOP_REGEX_LEN}-byte limit")
        self.stop = None
        self.stop_regex = None

    def verify(self, vocab_size: int) -> None:
        if self.beam_width is not None and self.beam_width < 1:
            raise ValueError(f"beam_width must be at least 1, got {self.beam_width}.")
        if not math.isfinite(self.temperature) or self.temperature < 0.0:
            raise ValueError(f"temperature must be a non-negative finite number, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.top_k < 1 or self.top_k == -1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(
                f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {self.repetition_penalty}."
            )
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be in [0, max_new_tokens], got {self.min_new_tokens}.")
        if self.max_new_tokens is not None:
            if self.max_new_tokens < 0:
                raise ValueError(f"max_new_tokens must be at least 0, got {self.max_new_tokens}.")
            if not self.min_new_tokens <= self.max_new_tokens:
                raise ValueError(
                    f"min_new_tokens must be in [0, max_new_tokens({self.max_new_tokens})], got {self.min_new_tokens}."
                )
        self._verify_rest(vocab_size)

    def _verify_rest(self, vocab_size: int) -> None:
        if self.logit_bias is not None:
            for token_id in self.logit_bias:
                if not 0 <= int(token_id) < vocab_size:
                    raise ValueError(f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}.")
        if self.sampling_seed is not None:
            if not isinstance(self.sampling_seed, int):
                raise ValueError(f"sampling_seed must be an integer, got {type(self.sampling_seed).__name__}.")
            if not -(2**63) <= self.sampling_seed <= 2**63 - 1:
                raise ValueError(f"sampling_seed must be in [-2**63, 2**63 - 1], got {self.sampling_seed}.")
        _reasoning_end_ids(self.custom_params, vocab_size)
        if sum(getattr(self, name) is not None for name in _GRAMMARS) > 1:
            raise ValueError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")


def _reasoning_end_ids(custom_params: Any, vocab_size: int) -> None:
    """``get_request_reasoning_end_token_ids(..., strict=True)``: a malformed private key is refused."""
    if not isinstance(custom_params, dict) or REASONING_END_KEY not in custom_params:
        return
    ids = custom_params[REASONING_END_KEY]
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > MAX_REASONING_END_IDS
        or any(type(i) is not int or i < 0 or i >= vocab_size for i in ids)
    ):
        raise ValueError(
            "request reasoning end token IDs must be a non-empty, vocabulary-bounded list of at most "
            f"{MAX_REASONING_END_IDS} integers"
        )


def _response_format(body: dict[str, Any]) -> dict[str, Any]:
    fmt = body.get("response_format")
    if not isinstance(fmt, dict):
        return {}
    if fmt.get("type") == "json_object":
        return {"json_schema": '{"type": "object"}'}
    if fmt.get("type") == "json_schema":
        return {"json_schema": str(fmt.get("json_schema") or fmt.get("schema"))}
    if fmt.get("type") == "structural_tag":
        return {"structural_tag": str(fmt)}
    return {}


def request_kwargs(body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
    """``ChatCompletionRequest.to_sampling_params`` (``chat``) or ``OpenAIServingCompletion._build_sampling_params``
    for a coerced body: the request's value, else sglang's default."""

    def param(name: str, default: Any) -> Any:
        value = body.get(name)
        return default if value is None else value

    return {
        "temperature": param("temperature", 1.0),
        "max_new_tokens": (body.get("max_completion_tokens") or body.get("max_tokens")) if chat
        else body.get("max_tokens", 16),
        "min_new_tokens": body.get("min_tokens", 0),
        "stop": body.get("stop"),
        "stop_regex": body.get("stop_regex"),
        "top_p": param("top_p", 1.0),
        "top_k": param("top_k", -1),
        "min_p": param("min_p", 0.0),
        "presence_penalty": body.get("presence_penalty", 0.0),
        "frequency_penalty": body.get("frequency_penalty", 0.0),
        "repetition_penalty": param("repetition_penalty", 1.0),
        "regex": body.get("regex"),
        "ebnf": body.get("ebnf"),
        "json_schema": None if chat else body.get("json_schema"),  # a CompletionRequest field only
        "n": body.get("n", 1),
        "ignore_eos": body.get("ignore_eos", False),
        "logit_bias": body.get("logit_bias"),
        "custom_params": body.get("custom_params"),
        "sampling_seed": body.get("seed"),
        "watermark": body.get("watermark"),
        **_response_format(body),
    }  # fmt: skip
