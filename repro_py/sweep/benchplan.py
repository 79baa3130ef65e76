"""The benchmark settings of a sweep: contexts, concurrency, repeats, output length."""

from __future__ import annotations

import dataclasses

DEFAULT_CONTEXTS: tuple[int, ...] = (60, 1024, 4096)
DEFAULT_CONCURRENCY: tuple[int, ...] = (1, 8, 32)
DEFAULT_REPEATS = 3
DEFAULT_MAX_TOKENS = 512


@dataclasses.dataclass(frozen=True)
class BenchPlan:
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    repeats: int = DEFAULT_REPEATS
    max_tokens: int = DEFAULT_MAX_TOKENS

    @property
    def cells(self) -> int:
        return len(self.contexts) * len(self.concurrency)

    def as_dict(self) -> dict[str, object]:
        return {
            "contexts": list(self.contexts),
            "concurrency": list(self.concurrency),
            "repeats": self.repeats,
            "max_tokens": self.max_tokens,
        }
