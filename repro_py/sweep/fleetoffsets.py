"""Host-to-host offsets within one hardware class, from the reference config each host measured at the start.

Hosts of one class differ (clocks, thermals, PCIe/NVLink topology). Each host's offset is the median, over the
reference benchmark's cells, of its output throughput relative to the class median in that cell
(``+0.03``: 3% faster than the class's median host). Its uncertainty adds the host's own repeat-to-repeat spread
(the median CV over its cells, over the square root of the repeats) and the spread of its per-cell ratios, in
quadrature. A config measured on a host is compared with its figures divided by ``1 + offset`` and its CV
widened by the uncertainty (``repro_py.report.tables``). A host whose offset is beyond the limit (either way),
or whose reference gave no figure, is flagged: it measures nothing in this run, and the fleet page says why.
A failed cell is never a figure: only ``ok`` cells with a median count.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from typing import Any

#: the default limit on |offset| before a host is flagged (``--host-offset-limit``)
DEFAULT_LIMIT = 0.05


@dataclasses.dataclass(frozen=True)
class HostOffset:
    host: str
    offset: float | None
    uncertainty: float | None
    cells: int
    flagged: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _cell_tps(bench: Mapping[str, Any] | None) -> dict[tuple[Any, Any], tuple[float, float | None, int]]:
    """(context, concurrency) -> (median output tps, its CV, repeats used), ok cells with a figure only."""
    out: dict[tuple[Any, Any], tuple[float, float | None, int]] = {}
    for cell in (bench or {}).get("cells") or []:
        if not isinstance(cell, Mapping) or cell.get("status") not in (None, "ok"):
            continue
        median = cell.get("median") or {}
        tps = median.get("output_tps")
        if not isinstance(tps, int | float) or isinstance(tps, bool) or tps <= 0:
            continue
        cv = (cell.get("cv") or {}).get("output_tps")
        used = int(median.get("repeats_used") or cell.get("repeats_ok") or 1)
        out[(cell.get("context"), cell.get("concurrency"))] = (
            float(tps), float(cv) if isinstance(cv, int | float) else None, max(used, 1),
        )  # fmt: skip
    return out


def _offsets(
    figures: Mapping[str, dict[tuple[Any, Any], tuple[float, float | None, int]]], among: set[str]
) -> dict[str, tuple[float, float, int]]:
    """host -> (offset, uncertainty, cells) against the per-cell median of the hosts in ``among``."""
    medians: dict[tuple[Any, Any], float] = {}
    for cell in {c for host in among for c in figures[host]}:
        medians[cell] = statistics.median(figures[host][cell][0] for host in among if cell in figures[host])
    out: dict[str, tuple[float, float, int]] = {}
    for host, cells in figures.items():
        ratios = [tps / medians[cell] - 1.0 for cell, (tps, _, _) in cells.items() if cell in medians]
        if not ratios:
            continue
        own = [cv / math.sqrt(n) for _, cv, n in cells.values() if cv is not None]
        spread = statistics.stdev(ratios) / math.sqrt(len(ratios)) if len(ratios) > 1 else 0.0
        noise = statistics.median(own) if own else 0.0
        out[host] = (statistics.median(ratios), math.sqrt(noise**2 + spread**2), len(ratios))
    return out


def host_offsets(references: Mapping[str, Mapping[str, Any] | None], *, limit: float = DEFAULT_LIMIT) -> dict[
    str, HostOffset
]:
    """Each host's offset from the class median (``references``: host -> its reference benchmark result). The
    host furthest beyond ``limit`` is flagged and the median taken again without it, until every host left is
    within it: a flagged host is never part of the median the others are measured against."""
    figures = {host: _cell_tps(bench) for host, bench in references.items()}
    among = {host for host, cells in figures.items() if cells}
    measured = _offsets(figures, among)
    while among:
        worst = max(among, key=lambda h: (abs(measured[h][0]), h))
        if abs(measured[worst][0]) <= limit:
            break
        among.discard(worst)
        if among:
            measured = {**measured, **_offsets(figures, among)}
    out: dict[str, HostOffset] = {}
    for host in sorted(figures):
        if host not in measured:
            out[host] = HostOffset(host, None, None, 0, True, "its reference measurement gave no figure")
            continue
        offset, uncertainty, cells = measured[host]
        flagged = host not in among
        reason = (
            f"offset {offset:+.1%} beyond the limit of {limit:.0%} from the class median" if flagged
            else f"offset {offset:+.1%} within {limit:.0%} of the class median"
        )  # fmt: skip
        out[host] = HostOffset(host, round(offset, 5), round(uncertainty, 5), cells, flagged, reason)
    return out
