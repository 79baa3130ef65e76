"""matplotlib is imported when a plot is drawn, not when a command starts: it doubled the start-up of
``python -m repro_py.sweep`` (``benchmarks/cli_startup.py``: 0.36 CPU s as it is, 0.72 with matplotlib imported
first), paid by every ``--help``, plan, dry run and resume, and by every command the test suite starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from repro_py.report import plots

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cli", ["sweep", "tune", "report", "bench", "gates", "simengine"])
def test_a_command_starts_without_matplotlib(cli: str) -> None:
    code = f"import sys, repro_py.{cli}.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"repro_py.{cli}.cli imports {out.strip()}"


def test_the_first_plot_gets_pyplot_on_the_agg_backend() -> None:
    plt = plots.pyplot()
    assert plt.get_backend().lower() == "agg"
    fig, _ = plt.subplots()
    plt.close(fig)
