"""A tuning run's hard limits (``--max-restarts``, ``--max-hours``, ``--max-restarts-per-host``) and whether a budget
holds what every run must measure before its first candidate."""

from __future__ import annotations

import dataclasses

from repro_py.tune.search import Search


@dataclasses.dataclass(frozen=True)
class Budget:
    #: every engine restart of the run, on every host, the final restores included
    max_restarts: int | None = None
    max_hours: float | None = None
    restore: bool = True
    #: several hosts: the most restarts one host makes, its final restore included (None: no limit of its own)
    max_per_host: int | None = None

    def __post_init__(self) -> None:
        least = 2 if self.restore else 1
        if self.max_restarts is not None and self.max_restarts < least:
            raise ValueError(
                f"--max-restarts {self.max_restarts}: at least {least} "
                "(one config" + (" and the final restore of the default config)" if self.restore else ")")
            )
        if self.max_per_host is not None and self.max_per_host < least:
            raise ValueError(f"--max-restarts-per-host {self.max_per_host}: at least {least} (one config"
                             + (" and the host's final restore)" if self.restore else ")"))  # fmt: skip
        if self.max_hours is not None and not self.max_hours > 0:
            raise ValueError(f"--max-hours {self.max_hours}: must be > 0")

    def as_dict(self) -> dict[str, object]:
        return {"max_restarts": self.max_restarts, "max_hours": self.max_hours, "restore_reserved": self.restore,
                "max_restarts_per_host": self.max_per_host}  # fmt: skip


def budget_problem(search: Search, budget: Budget, per_config: int = 1, *, hosts: int = 1) -> str | None:
    """Why ``budget`` cannot measure what every run must (the baseline, the current config in its restarts,
    the restores, one candidate), or None. ``per_config``: the restarts a gated config takes (two when its
    lossless gate has a restart of its own); ``hosts``: the hosts measuring side by side (each restores)."""
    if budget.max_restarts is None:
        return None
    restores = hosts if budget.restore and search.default is not None else 0
    needed, parts = search.mandatory_restarts(restores=restores, per_config=per_config)
    if budget.max_restarts >= needed + per_config:
        return None
    return (
        f"--max-restarts {budget.max_restarts} is too small for this run: it needs "
        + ", ".join(parts)
        + f", and {per_config} for at least one candidate; allowed: {needed + per_config} or more"
    )
