"""Faults the simulated engine can be told to have (``--sim-fault``, repeatable).

``crash-on-load``         the process dies during the model load (nothing ever listens)
``never-ready``           it listens but warmup never finishes: /health stays 503
``crash-after:N``         it serves N generation requests, then dies when the next arrives
``oom-above-budget:N``    refuses to start (a CUDA OOM at the end of the load) when the DDTree budget > N
``mask-offset``           tree mode with budget+1 != block size: greedy text is garbled from an
                          early position on and acceptance collapses (the bug the mask fix cured)
``stream-error-after:N``  after N generation requests, each further one fails halfway through its
                          tokens: a streamed one gets sglang's mid-stream error event, a non-streamed
                          one a 500 error
``abort-after:N``         after N generation requests, each further one is aborted halfway through
                          (``finish_reason: "abort"``, a normal-looking end of stream)
``stall-after:N``         after N generation requests, each further one stops sending halfway through
                          and never finishes (the connection stays open)
``kv-overrun``            tree mode: the verify window writes past each request's own KV, so while two or
                          more requests decode in the same step each one corrupts another's next token;
                          a request decoding alone is never affected, and nothing raises (the class of
                          the reservation bug the KV fix cured; only a concurrent check can see it)
``bonus-unadjusted``      tree mode, sampled requests: when tree verification rejects every drafted child,
                          the bonus token is drawn from the whole target distribution instead of the mass
                          the children did not cover, so drafted tokens come out too often (the planted bug
                          of the sampled-verification proof). Greedy output and acceptance are untouched;
                          only a distributional check (the sampled gate) can see it
"""

from __future__ import annotations

import dataclasses

FAULT_NAMES = (
    "crash-on-load",
    "never-ready",
    "crash-after",
    "oom-above-budget",
    "mask-offset",
    "stream-error-after",
    "abort-after",
    "stall-after",
    "kv-overrun",
    "bonus-unadjusted",
)
_WITH_ARG = frozenset({"crash-after", "oom-above-budget", "stream-error-after", "abort-after", "stall-after"})
ALLOWED = (
    "crash-on-load, never-ready, crash-after:N, oom-above-budget:N, mask-offset, stream-error-after:N, "
    "abort-after:N, stall-after:N, kv-overrun, bonus-unadjusted"
)
# request faults: name -> what happens to a request past the threshold
REQUEST_FAULTS = {"stream-error-after": "error", "abort-after": "abort", "stall-after": "stall"}


class FaultError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Faults:
    specs: tuple[str, ...] = ()
    crash_on_load: bool = False
    never_ready: bool = False
    crash_after: int | None = None
    oom_above_budget: int | None = None
    mask_offset: bool = False
    kv_overrun: bool = False
    bonus_unadjusted: bool = False
    stream_error_after: int | None = None
    abort_after: int | None = None
    stall_after: int | None = None

    def request_fault(self, served: int) -> str | None:
        """What happens to a generation request that arrives after ``served`` others: None, or
        "error" / "abort" / "stall" (the first fault whose threshold it is past)."""
        for name, effect in REQUEST_FAULTS.items():
            threshold = getattr(self, name.replace("-", "_"))
            if threshold is not None and served >= threshold:
                return effect
        return None

    def oom_at_load(self, budget: int | None) -> bool:
        return self.oom_above_budget is not None and budget is not None and budget > self.oom_above_budget

    def mask_offset_active(self, tree_mode: bool, budget: int | None, block_size: int | None) -> bool:
        """The fault bites only where the bug did: a tree whose verify width differs from the block."""
        return (
            self.mask_offset
            and tree_mode
            and budget is not None
            and block_size is not None
            and (budget + 1 != block_size)
        )


def parse_faults(values: list[str]) -> Faults:
    """Parse ``--sim-fault`` values; raise FaultError naming a bad one."""
    fields: dict[str, object] = {}
    for raw in values:
        name, sep, arg = raw.strip().partition(":")
        if name not in FAULT_NAMES:
            raise FaultError(f"--sim-fault {raw!r}: unknown fault {name!r}; allowed: {ALLOWED}")
        if name in _WITH_ARG:
            if not sep or not arg.isdigit():
                raise FaultError(f"--sim-fault {raw!r}: {name} needs a non-negative integer, e.g. {name}:8")
            fields[name.replace("-", "_")] = int(arg)
        else:
            if sep:
                raise FaultError(f"--sim-fault {raw!r}: {name} takes no argument")
            fields[name.replace("-", "_")] = True
    return Faults(specs=tuple(v.strip() for v in values), **fields)  # type: ignore[arg-type]
