"""The report templates travel with the package: a wheel built from the project has them,
and the renderers find them next to their modules (not through the source tree's layout)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_renderers_load_their_templates_from_the_package():
    from repro_py.report import render  # noqa: PLC0415
    from repro_py.tune import report  # noqa: PLC0415

    for module, name in ((render, "summary.md.j2"), (report, "report.md.j2")):
        assert module.TEMPLATE_DIR.is_relative_to(Path(module.__file__).parent)
        assert (module.TEMPLATE_DIR / name).is_file()


def test_a_built_wheel_carries_the_templates(tmp_path):
    """Built as scripts/build-wheelhouse.sh builds it (pyproject.toml + repro_py, isolated build)."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copytree(ROOT / "repro_py", src / "repro_py", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = (tmp_path / "out").glob("repro_py-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "repro_py/report/templates/summary.md.j2" in names
    assert "repro_py/tune/templates/report.md.j2" in names
