"""A cell above the server's running-request cap (status queued) is named in the summary and left
out of every tok/s figure: it is not throughput at its concurrency."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from repro_py.report.render import build_report
from tests.report.conftest import CONCURRENCY, CONTEXTS, ddtree, result


def test_queued_cells_are_named_and_never_shown_as_throughput(make_run: Callable[..., Path]) -> None:
    capped = result("ddtree-b8-t4-w2048-bs8", ddtree(8, 4), single=150, aggregate=4321, long_ctx=90)
    for cell in capped["bench"]["cells"]:
        if cell["concurrency"] == CONCURRENCY[-1]:
            cell.update(status="queued", running_cap=8, queued=True, reason="above the cap")
    paths = build_report(make_run(results=[capped]))
    md = paths["summary_md"].read_text()
    assert (
        f"ddtree-b8-t4-w2048-bs8 at context {CONTEXTS[0]}, concurrency {CONCURRENCY[-1]} (cap 8)" in md
    ), md
    assert "not throughput at that concurrency" in " ".join(md.split())
    assert "4321" not in md  # the queued cell's tok/s is no aggregate figure
