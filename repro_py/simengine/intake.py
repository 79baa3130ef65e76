"""From a validated request body to an admitted request, through sglang 0.5.23's checks in sglang's order.

After the FastAPI/pydantic layer (``validation``) and, on ``/generate``, the
API contract (``contract``), sglang runs, for one request:

1. the serving layer's ``_validate_request`` (chat: ``Messages cannot be
   empty.``, then an image/video/audio part refused by a text-only model;
   completions: ``Prompt cannot be empty``), then its conversion into
   sampling parameters (``sampling.request_kwargs``);
2. the tokenizer manager: the batch normalisation (``/generate``: ``Either text,
   input_ids or input_embeds should be provided.``), the input and total
   context-length checks, the custom-logit-processor switch, then
   ``SamplingParams`` construction, ``normalize`` and ``verify``;
3. with DDTree on (patch 0010), the DDTree refusal of the normalized
   parameters, after all of the above (so ``max_tokens: -1`` gets sglang's own
   message, not the DDTree one).

Each refusal raises ``BadRequest`` with sglang's message; the caller answers it
in the route's shape. Nothing here touches the engine's state: a refused
request never counts toward the injected faults (``crash-after:N`` ...).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from repro_py.simengine import ddtree_refusals, sampling, sglang_reference, tokenizer
from repro_py.simengine.httputil import BadRequest
from repro_py.simengine.openai_shapes import render_chat
from repro_py.simengine.settings import Settings

CUSTOM_LOGIT_PROCESSOR_OFF = (
    "The server is not configured to enable custom logit processor. "
    "Please set `--enable-custom-logit-processor` to enable this feature."
)


@dataclasses.dataclass(frozen=True)
class Admitted:
    """A request that passed every check: what the engine needs to generate it."""

    prompt_key: str
    prompt_tokens: int
    params: sampling.SamplingParams
    streaming: bool
    thinking: bool = True
    problem_source: str | None = None

    def max_tokens(self, context_length: int) -> int:
        """sglang generates up to the context's end when the request names no limit."""
        limit = self.params.max_new_tokens
        return max(1, context_length - self.prompt_tokens) if limit is None else int(limit)

    @property
    def temperature(self) -> float:
        """The temperature the text is generated at: 0 for greedy (sglang's top_k 1)."""
        return 0.0 if self.params.greedy else float(self.params.temperature)


def tokenizer_manager(
    settings: Settings, *, prompt_tokens: int, kwargs: dict[str, Any], custom_logit_processor: Any = None
) -> sampling.SamplingParams:
    """``_validate_one_request`` then ``_create_tokenized_object`` (with patch 0010's refusal)."""
    context = settings.context_length
    if prompt_tokens >= context:
        raise BadRequest(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context} tokens)."
        )
    max_new = kwargs.get("max_new_tokens")
    if max_new is not None and max_new + prompt_tokens > context:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested "
            f"a total of {max_new + prompt_tokens} tokens: {prompt_tokens} tokens from the input messages and "
            f"{max_new} tokens for the completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."
        )
    if custom_logit_processor:
        raise BadRequest(CUSTOM_LOGIT_PROCESSOR_OFF)  # the engine has no --enable-custom-logit-processor
    try:
        params = sampling.SamplingParams.build(kwargs)
        params.normalize()
        params.verify(tokenizer.VOCAB_SIZE)
    except ValueError as exc:
        raise BadRequest(str(exc)) from exc
    if settings.tree_mode:
        why = ddtree_refusals.refusal(params, custom_logit_processor=custom_logit_processor)
        if why is not None:
            raise BadRequest(why)
    return params


def _media_part(messages: list[Any]) -> str | None:
    """The first image, video or audio part of the messages, by the type sglang's model gives it (an inline
    ``input_audio`` part is converted to ``audio_url`` as it validates)."""
    media = set(sglang_reference.media_part_types())
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            kind = "audio_url" if kind == "input_audio" else kind
            if kind in media:
                return str(kind)
    return None


def chat(settings: Settings, body: dict[str, Any]) -> Admitted:
    if not body["messages"]:
        raise BadRequest("Messages cannot be empty.")
    media = _media_part(body["messages"])
    if media is not None:  # _validate_media_content: the simulated model is text-only
        raise BadRequest(f"Model only supports text input; received unsupported content type '{media}'.")
    prompt_key, last_user = render_chat(body["messages"])
    kwargs = body.get("chat_template_kwargs") or {}
    prompt_tokens = tokenizer.count(prompt_key)
    params = tokenizer_manager(
        settings, prompt_tokens=prompt_tokens, kwargs=sampling.request_kwargs(body, chat=True),
        custom_logit_processor=body.get("custom_logit_processor"),
    )  # fmt: skip
    return Admitted(
        prompt_key, prompt_tokens, params, streaming=bool(body.get("stream", False)),
        thinking=not (isinstance(kwargs, dict) and kwargs.get("thinking") is False), problem_source=last_user,
    )  # fmt: skip


def completion(settings: Settings, body: dict[str, Any]) -> Admitted:
    prompt = body["prompt"]
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
        raise BadRequest("Prompt cannot be empty")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        key, count = prompt, tokenizer.count(prompt)
    else:  # token ids (a flat list counts as its length) or a batch, simulated as one prompt
        key = json.dumps(prompt)
        count = len(prompt) if all(isinstance(p, int) for p in prompt) else tokenizer.count(key)
    params = tokenizer_manager(
        settings, prompt_tokens=count, kwargs=sampling.request_kwargs(body, chat=False),
        custom_logit_processor=body.get("custom_logit_processor"),
    )  # fmt: skip
    return Admitted(key, count, params, streaming=bool(body.get("stream", False)))


def generate(settings: Settings, body: dict[str, Any]) -> Admitted:
    """A ``/generate`` body that passed the pydantic layer and the API contract."""
    text, ids = body.get("text"), body.get("input_ids")
    if text is None and ids is None and body.get("input_embeds") is None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    if isinstance(text, list):
        if len(text) != 1:
            raise BadRequest("SIMULATED engine: a batch /generate (a list of several texts) is not simulated")
        text = text[0]
    if isinstance(text, str):
        key, count = text, tokenizer.count(text)
    elif isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        key, count = " ".join(str(i) for i in ids), len(ids)
    else:
        raise BadRequest("SIMULATED engine: /generate takes one text or one flat list of input_ids")
    kwargs = body.get("sampling_params") or {}
    if isinstance(kwargs, list):  # one set of parameters per prompt: a batch of one is one request
        if len(kwargs) != 1:
            raise BadRequest("SIMULATED engine: a batch /generate (a list of sampling_params) is not simulated")
        kwargs = kwargs[0]
    params = tokenizer_manager(
        settings, prompt_tokens=count, kwargs=dict(kwargs), custom_logit_processor=body.get("custom_logit_processor")
    )
    return Admitted(key, count, params, streaming=bool(body.get("stream", False)))
