"""The report templates are the operator's to edit, at the top of the checkout (``templates/report``,
``templates/tune``), and travel with the package: ``repro_py/report/templates`` and ``repro_py/tune/templates``
link them, the renderers find them next to their modules, and a wheel built as scripts/build-wheelhouse.sh builds
it (the links followed) carries them."""

from __future__ import annotations

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


TOP = {"report": ("summary.md.j2", "fleet.md.j2"), "tune": ("report.md.j2",)}


def test_the_templates_an_operator_edits_are_at_the_top_and_the_package_links_them():
    for package, names in TOP.items():
        link = ROOT / "repro_py" / package / "templates"
        assert link.is_symlink() and link.resolve() == ROOT / "templates" / package, link
        for name in names:
            path = ROOT / "templates" / package / name
            assert path.is_file() and not path.is_symlink(), path


def test_a_built_wheel_carries_the_templates(tmp_path):
    """Built as scripts/build-wheelhouse.sh builds it (its copy of pyproject.toml + repro_py, the links followed;
    an isolated build)."""
    src = tmp_path / "src"
    src.mkdir()
    script = (ROOT / "scripts" / "build-wheelhouse.sh").read_text()
    assert 'cp -rL "$root/pyproject.toml" "$root/repro_py" "$build/"' in script  # a plain cp -r keeps dangling links
    subprocess.run(["cp", "-rL", str(ROOT / "pyproject.toml"), str(ROOT / "repro_py"), str(src)], check=True)
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"), str(src)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    (wheel,) = (tmp_path / "out").glob("repro_py-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package, templates in TOP.items():
        for name in templates:
            assert f"repro_py/{package}/templates/{name}" in names, sorted(n for n in names if "templates" in n)
