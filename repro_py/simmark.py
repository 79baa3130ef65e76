"""How a simulated engine's figures are marked: SIMULATED and the ``--sim-speed`` factor.

Every artifact a simulated engine influenced (plots, summary, CSV, bench
output) says SIMULATED and the speed factor its figures were produced at,
because a simulated figure is the performance model's output multiplied by
that factor. Figures produced at different speeds are not comparable; a note
for such a mix says so instead of one factor.
"""

from __future__ import annotations

from collections.abc import Iterable

SIM_MARK = "SIMULATED"


def speed_text(speed: float | None) -> str:
    """``x10``, ``x2.5``; ``x?`` when the factor is unknown."""
    return "x?" if speed is None else f"x{speed:g}"


def distinct_speeds(speeds: Iterable[float | None]) -> list[float]:
    """The known speed factors, sorted, each once."""
    return sorted({float(s) for s in speeds if s is not None})


def sim_note(speeds: Iterable[float | None]) -> str:
    """The mark for figures produced at ``speeds`` (one per result or cell).

    One factor: ``SIMULATED, sim-speed x10: figures are model outputs x10``.
    Several: ``SIMULATED, MIXED sim-speeds x1/x10: figures are not comparable across speeds``.
    """
    known = distinct_speeds(speeds)
    if not known:
        return f"{SIM_MARK}, sim-speed unknown: figures are model outputs times an unknown factor"
    if len(known) == 1:
        text = speed_text(known[0])
        return f"{SIM_MARK}, sim-speed {text}: figures are model outputs {text}"
    joined = "/".join(speed_text(s) for s in known)
    return f"{SIM_MARK}, MIXED sim-speeds {joined}: figures are not comparable across speeds"
