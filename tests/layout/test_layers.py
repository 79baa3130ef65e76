"""The house's rules, read from the code with ``ast``: every import of every repro_py module, the ones inside
functions and under ``if TYPE_CHECKING:`` included (a deferred or type-only import hides an edge; it does not
remove it: the two modules are still one unit to read and to change).

1. No import circle (the test names it).
2. A command line (``<package>/cli.py``, ``__main__``) is imported by nothing but its own package's ``__main__``.
3. No product module imports a test helper (``repro_py/simengine/testing.py``, anything under ``tests/``).
4. No arrow up the floors of :data:`FLOORS` (docs/architecture.md, "Floors", is the same table): a module imports
   from its own floor or below.
5. No product Python file (repro_py/, roles/, plugins/) over 450 lines, no function over 100 lines
   (``end_lineno - lineno + 1``, a nested function counted inside its outer one too).

On the tree before these rules held (commit 18eed95) every rule failed:
1. ``repro_py.tune.proposals -> repro_py.tune.search -> repro_py.tune.proposals`` (and ``verdict``, the same way;
   the other direction was a type-only import);
2. ``repro_py.tune.sweepio -> repro_py.sweep.cli``;
3. ``repro_py.sweep.cli`` and ``repro_py.sweep.localproc -> repro_py.simengine.testing``;
4. ``repro_py.report.tables`` and ``repro_py.report.render -> repro_py.sweep.lossless_restart``,
   ``repro_py.report.tables -> repro_py.results.schema`` (the report read the result files through the
   sweep, which itself calls the report: the result files' own modules are now the ``results`` floor), and the
   table named a floor, ``repro_py.results``, the tree did not have;
5. files: ``plugins/modules/sglang_patch_series.py`` 531, ``repro_py/tune/cli.py`` 491,
   ``repro_py/sweep/cli.py`` 485; functions: ``simengine/generation.py: add_generation_routes`` 361 (its
   ``chat`` 107), ``tune/cli.py: main`` 199, ``simengine/server.py: build_app`` 183, ``simengine/cli.py: resolve``
   179 and ``build_parser`` 139, ``plugins/modules/sglang_wait_ready.py: main`` 166,
   ``sweep/cli.py: main`` 138, ``tune/cli.py: build_parser`` 124, ``bench/matrix.py: run_cell`` 112.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "repro_py"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

#: The floors of repro_py, bottom up; a unit is a top-level module or a subpackage. A module imports from its own
#: floor or below, never from above (docs/architecture.md, "Floors", says the same, checked below).
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "base",
        (
            "repro_py",
            "repro_py.atomicio",
            "repro_py.exitcodes",
            "repro_py.cliparse",
            "repro_py.simmark",
            "repro_py.endpoint",
            "repro_py.spec_config",
            "repro_py.sampling_settings",
            "repro_py.ansibleaccess",
            "repro_py.inventory_values",
            "repro_py.inventory_endpoint",
            "repro_py.manifest",
            "repro_py.blasthreads",
        ),
    ),
    ("codeeval", ("repro_py.codeeval",)),
    ("simengine", ("repro_py.simengine",)),
    ("bench", ("repro_py.bench",)),
    ("gates", ("repro_py.gates",)),
    ("results", ("repro_py.results",)),
    ("report", ("repro_py.report",)),
    ("sweep", ("repro_py.sweep",)),
    ("tune", ("repro_py.tune",)),
)

#: Test helpers that product code must not import (and the tests/ tree, by prefix).
TEST_HELPERS = frozenset({"repro_py.simengine.testing"})

MAX_FILE_LINES = 450
MAX_FUNCTION_LINES = 100
#: Where product Python lives (the size rules); tests, benchmarks and patch tools are not product.
PRODUCT_TREES = ("repro_py", "roles", "plugins")
#: ``path: qualified function name`` -> (its lines when listed, why it is not split yet). Shrinking only: an entry
#: whose function grew, shrank under the limit or is gone fails, so the list only ever gets shorter.
FUNCTION_ALLOWLIST: dict[str, tuple[int, str]] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def repro_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imported_names(tree: ast.Module, name: str, is_package: bool, modules: set[str]) -> list[str]:
    """Every module an import statement anywhere in ``tree`` names, relative imports resolved: ``import P.m``
    gives ``P.m``; ``from P import n`` gives ``P.n`` when that is a module (of ``modules``), else ``P``."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            out.extend(f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names)
    return out


def is_test_module(name: str) -> bool:
    return name.split(".", maxsplit=1)[0] in ("tests", "conftest")


def graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the repro_py modules (and test modules) it imports."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = imported_names(tree, name, path.stem == "__init__", set(modules))
        edges[name] = {t for t in names if (t in modules or is_test_module(t)) and t != name}
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def all_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group (so a report names each, not just the first)."""
    remaining = {k: set(v) for k, v in edges.items()}
    found: list[list[str]] = []
    while (cycle := find_cycle(remaining)) is not None:
        found.append(cycle)
        remaining[cycle[0]].discard(cycle[1])
    return found


def is_cli(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ("cli", "__main__")


def cli_offences(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a command line by anything but its own package's ``__main__``."""
    out = []
    for src, deps in edges.items():
        for dep in deps:
            own_main = src.endswith(".__main__") and src.rsplit(".", 1)[0] == dep.rsplit(".", 1)[0]
            if is_cli(dep) and not own_main:
                out.append(f"{src} -> {dep}")
    return sorted(out)


def helper_offences(edges: dict[str, set[str]]) -> list[str]:
    out = []
    for src, deps in edges.items():
        if src in TEST_HELPERS:
            continue
        for dep in deps:
            if dep in TEST_HELPERS or is_test_module(dep):
                out.append(f"{src} -> {dep}")
    return sorted(out)


def unit_of(name: str) -> str:
    """``repro_py.sweep.cli`` -> ``repro_py.sweep``; ``repro_py.manifest`` -> itself."""
    return ".".join(name.split(".")[:2])


def floor_of() -> dict[str, int]:
    return {unit: index for index, (_, units) in enumerate(FLOORS) for unit in units}


def floor_offences(edges: dict[str, set[str]]) -> list[str]:
    floors = floor_of()
    out = []
    for src, deps in edges.items():
        for dep in deps:
            if dep not in edges:
                continue
            low, high = floors.get(unit_of(src)), floors.get(unit_of(dep))
            if low is not None and high is not None and high > low:
                out.append(f"{src} (floor {FLOORS[low][0]}) -> {dep} (floor {FLOORS[high][0]})")
    return sorted(out)


def units_off_table(modules: dict[str, Path]) -> tuple[list[str], list[str]]:
    """(units of the tree the table does not place, units the table places that the tree lacks)."""
    tree_units = {unit_of(m) for m in modules}
    table_units = set(floor_of())
    return sorted(tree_units - table_units), sorted(table_units - tree_units)


def product_files() -> list[Path]:
    return sorted(p for tree in PRODUCT_TREES for p in (ROOT / tree).rglob("*.py"))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``qualified name`` -> lines, for each function of ``path`` longer than ``limit``."""
    out: dict[str, int] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    lines = child.end_lineno - child.lineno + 1
                    if lines > limit:
                        out[qual] = lines
                walk(child, qual + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")
    return out


# ---------------------------------------------------------------- the finders find


def test_the_finders_find_what_they_look_for(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert len(all_cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}})) == 2
    edges = {
        "repro_py.tune.x": {"repro_py.sweep.cli", "repro_py.simengine.testing", "tests.helpers"},
        "repro_py.sweep.__main__": {"repro_py.sweep.cli"},
        "repro_py.sweep.cli": set(),
        "repro_py.simengine.testing": set(),
        "repro_py.bench.y": {"repro_py.gates.z", "repro_py.exitcodes"},
        "repro_py.gates.z": set(),
        "repro_py.exitcodes": set(),
    }
    assert cli_offences(edges) == ["repro_py.tune.x -> repro_py.sweep.cli"]
    assert helper_offences(edges) == [
        "repro_py.tune.x -> repro_py.simengine.testing",
        "repro_py.tune.x -> tests.helpers",
    ]
    assert floor_offences(edges) == ["repro_py.bench.y (floor bench) -> repro_py.gates.z (floor gates)"]
    code = tmp_path / "m.py"
    code.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from repro_py.a import B\n"
        "def f():\n    import repro_py.c\n    from . import d\n" + "def g():\n" + "    x = 1\n" * 101
    )
    tree = ast.parse(code.read_text())
    names = imported_names(tree, "repro_py.pkg.m", False, {"repro_py.a", "repro_py.c", "repro_py.pkg.d"})
    assert set(names) == {"typing", "repro_py.a", "repro_py.c", "repro_py.pkg.d"}
    assert long_functions(code) == {"g": 102}


# ---------------------------------------------------------------- the rules hold


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    modules = repro_modules()
    assert "repro_py.simengine.settings" in modules
    return graph(modules)


def test_no_import_circle(edges):
    cycles = all_cycles(edges)
    assert not cycles, "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_a_command_line(edges):
    offences = cli_offences(edges)
    assert not offences, "a command line imported by other code (move what both need into a module of its own):\n" + (
        "\n".join(offences)
    )


def test_no_product_module_imports_a_test_helper(edges):
    offences = helper_offences(edges)
    assert not offences, "product code importing a test helper:\n" + "\n".join(offences)


def test_every_unit_has_its_floor():
    unplaced, absent = units_off_table(repro_modules())
    assert not unplaced, f"units without a floor in FLOORS (place them): {unplaced}"
    assert not absent, f"FLOORS places units the tree does not have: {absent}"


def test_no_arrow_runs_up_the_floors(edges):
    offences = floor_offences(edges)
    assert not offences, "imports up the floors (FLOORS, bottom up: " + " < ".join(f for f, _ in FLOORS) + "):\n" + (
        "\n".join(offences)
    )


def test_the_architecture_page_shows_the_same_floors():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert "## Floors" in text, f"{ARCHITECTURE} has no '## Floors' section with the table of FLOORS"
    section = text.split("## Floors", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `?(\w+)`? \| (.+?) \|", section, flags=re.MULTILINE)
    documented = {int(n): (floor, re.findall(r"`([\w.]+)`", units)) for n, floor, units in rows}
    expected = {n: (floor, list(units)) for n, (floor, units) in enumerate(FLOORS)}
    assert documented == expected


# ---------------------------------------------------------------- sizes


def test_no_product_file_over_the_line_limit():
    over = {
        str(p.relative_to(ROOT)): n
        for p in product_files()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    }
    assert not over, f"product files over {MAX_FILE_LINES} lines (split them by what the parts do): {over}"


def test_no_function_over_the_line_limit():
    found = {
        f"{p.relative_to(ROOT)}: {qual}": n for p in product_files() for qual, n in long_functions(p).items()
    }
    unlisted = {k: n for k, n in found.items() if k not in FUNCTION_ALLOWLIST}
    assert not unlisted, f"functions over {MAX_FUNCTION_LINES} lines (split them by what the parts do): {unlisted}"
    stale = {
        k: (found.get(k), listed)
        for k, (listed, _) in FUNCTION_ALLOWLIST.items()
        if k not in found or found[k] > listed
    }
    assert not stale, f"allowlist entries that grew, or no longer need listing (remove them): {stale}"
