"""Request bodies that ``refgen`` puts to sglang 0.5.23's own pydantic request models.

Bad and borderline ones: wrong types, lax-mode coercions pydantic accepts
(``"0.5"``, ``2.0``, ``"yes"``), missing required fields, nulls. The verdicts
(status and error list) go into ``sglang_reference.json``; the simulated
engine must give the same answer to each.
"""

from __future__ import annotations

from typing import Any

# Bad (and borderline) request bodies; sglang's pydantic models decide which are refused.
_MSG = [{"role": "user", "content": "hi"}]
BAD_REQUESTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("/v1/chat/completions", {"messages": _MSG, "temperature": "abc"}),
    ("/v1/chat/completions", {"messages": _MSG, "temperature": "0.5"}),
    ("/v1/chat/completions", {"messages": _MSG, "temperature": [1]}),
    ("/v1/chat/completions", {"messages": _MSG, "temperature": None}),
    ("/v1/chat/completions", {"messages": _MSG, "top_p": "high"}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": "12"}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": "many"}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": 1.5}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": 2.0}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": [2]}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": "yes"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": "maybe"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": 2}),
    ("/v1/chat/completions", {"messages": _MSG, "seed": "s"}),
    ("/v1/chat/completions", {"messages": _MSG, "n": "two"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream_options": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream_options": {"include_usage": "maybe"}}),
    ("/v1/chat/completions", {"messages": _MSG, "stream_options": {"continuous_usage_stats": True}}),
    ("/v1/chat/completions", {"messages": _MSG, "ignore_eos": "perhaps"}),
    ("/v1/chat/completions", {"messages": "hi"}),
    ("/v1/chat/completions", {"model": "m"}),
    ("/v1/chat/completions", {"messages": _MSG, "temperature": "abc", "max_tokens": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "temperature": True}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": "1.0"}),
    ("/v1/chat/completions", {"messages": _MSG, "max_completion_tokens": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": "TRUE"}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": 1.0}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": []}),
    ("/v1/chat/completions", {"messages": _MSG, "frequency_penalty": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "presence_penalty": {}}),
    ("/v1/chat/completions", {"messages": _MSG, "top_k": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "min_p": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "min_tokens": 0.5}),
    ("/v1/chat/completions", {"messages": _MSG, "repetition_penalty": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "separate_reasoning": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "chat_template_kwargs": "x"}),
    ("/v1/chat/completions", {"messages": _MSG, "model": 5}),
    ("/v1/chat/completions", {"messages": _MSG, "stream": None}),
    ("/v1/chat/completions", {"messages": _MSG, "n": None}),
    ("/v1/chat/completions", {"messages": _MSG, "model": None}),
    ("/v1/chat/completions", {"messages": None}),
    ("/v1/chat/completions", {"messages": _MSG, "max_tokens": None, "seed": None, "stream_options": None}),
    ("/v1/completions", {"model": "m"}),
    ("/v1/completions", {"prompt": [1, 2, 3]}),
    ("/v1/completions", {"prompt": ["a", "b"]}),
    ("/v1/completions", {"prompt": "hi", "ignore_eos": "x", "seed": "y"}),
    ("/v1/completions", {"prompt": "hi", "stream_options": {"continuous_usage_stats": "x"}}),
    ("/v1/completions", {"prompt": "hi", "temperature": "abc"}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": "x"}),
    ("/v1/completions", {"prompt": None}),
    ("/v1/completions", {"prompt": 5}),
    ("/v1/completions", {"prompt": "hi", "stream": "maybe"}),
)
