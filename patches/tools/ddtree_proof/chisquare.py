"""Chi-square tests of sampled token sequences: against exact probabilities, and two samples
against each other. Shared by the CPU check (tests/patches/cpu/check_ddtree_sampling.py) and
the GPU proof's sampled part (sampled.py). p-values from the regularised upper incomplete
gamma function (torch.special.gammaincc): no scipy needed."""

# ruff: noqa: PLC0415 -- torch is imported where used: it comes from the CPU venv or the GPU venv at run time

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

Seq = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Result:
    stat: float
    df: int
    p: float
    impossible: int = 0  # observed sequences with probability 0 (goodness of fit only)

    def rejects(self, alpha: float) -> bool:
        return self.p < alpha or self.impossible > 0

    def describe(self) -> str:
        extra = f", {self.impossible} impossible sequences" if self.impossible else ""
        return f"chi2 {self.stat:.1f}, df {self.df}, p {self.p:.3g}{extra}"


def p_value(stat: float, df: int) -> float:
    import torch

    if df <= 0:
        return 1.0
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))  # fmt: skip


def counts(samples: Iterable[Sequence[int]]) -> dict[Seq, int]:
    out: dict[Seq, int] = {}
    for row in samples:
        key = tuple(int(t) for t in row)
        out[key] = out.get(key, 0) + 1
    return out


def goodness_of_fit(samples: Sequence[Sequence[int]], exact: dict[Seq, float], *, min_expected: float = 5.0) -> Result:
    """Observed sequences against exact probabilities: one cell per sequence expected at least
    min_expected times, the rest pooled into one cell (kept when it is expected that often too).
    A sequence the exact distribution gives no mass is counted as impossible."""
    n = len(samples)
    seen = counts(samples)
    impossible = sum(v for k, v in seen.items() if exact.get(k, 0.0) <= 0.0)
    cells = [k for k, p in exact.items() if n * p >= min_expected]
    obs = [seen.get(k, 0) for k in cells]
    exp = [n * exact[k] for k in cells]
    rest = n * (1.0 - sum(exact[k] for k in cells))
    if rest >= min_expected:
        obs.append(n - sum(obs))
        exp.append(rest)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    df = len(obs) - 1
    return Result(stat, df, p_value(stat, df), impossible)


def homogeneity(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], *, min_count: int = 10) -> Result:
    """Two samples of sequences (2 x k table): one cell per sequence seen at least min_count
    times in both together, the rest pooled into one."""
    ca, cb = counts(a), counts(b)
    na, nb = len(a), len(b)
    keys = [k for k in set(ca) | set(cb) if ca.get(k, 0) + cb.get(k, 0) >= min_count]
    oa = [ca.get(k, 0) for k in keys] + [na - sum(ca.get(k, 0) for k in keys)]
    ob = [cb.get(k, 0) for k in keys] + [nb - sum(cb.get(k, 0) for k in keys)]
    if oa[-1] + ob[-1] == 0:
        oa, ob = oa[:-1], ob[:-1]
    stat = 0.0
    for x, y in zip(oa, ob, strict=True):
        total = x + y
        ex, ey = total * na / (na + nb), total * nb / (na + nb)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    df = len(oa) - 1
    return Result(stat, df, p_value(stat, df))
