"""One owner for the config contract's key lists: ``repro_py/spec_config.py`` (``FIELDS``).

Every other product file derives its lists of fields, and what an algorithm drops, from ``FIELDS`` (Python through
``repro_py.spec_config``; the role through what the ``ddtree_validate`` action returns). This reads every product
file and fails, naming the file, the line and the names, where one spells two or more fields by hand.

The names: every field's short key, role variable, engine flag and ``/server_info`` echo key. The rule:

* Python (``ast``): a list, tuple or set literal with the names of two or more fields side by side. An element
  names a field when it is one of its names as a string (``"budget"``) or an attribute of that name
  (``spec.budget``, ``ns.speculative_ddtree_budget``). A dict literal, or the keywords of ``dict(...)`` and
  ``<x>.update(...)``, with two or more such names side by side as keys whose values are expressions: a mapping of
  literal values (``{"budget": 8, "topk": 4}``) is a config, data, not a key list.
* YAML (roles, playbooks, inventories, data files of the package): a sequence with two or more names side by side;
  a mapping with two or more side by side as keys whose values are templates. A mapping of plain values is data:
  a role default, an inventory's config, an argument spec's entry (Ansible reads those per variable).
* Jinja (in YAML strings, in conditionals such as ``when:``, and in ``.j2`` templates): a list or tuple literal with
  two or more names side by side (a string, a variable, an attribute), or a dict literal with two or more as keys
  whose values are not literals.

"Side by side": adjacent elements. A vocabulary that holds the words "budget" and "window" apart (the simulated
engine's word list) lists words, not fields. Two names of one field (a flag and its echo key) rename one field;
they are not a list of fields.

``repro_py/spec_config.py`` itself is not read: it holds the table and the few rules spelled beside it
(``NONE_WORD_KEYS``); that its ``validate`` follows ``Field.algorithms`` is held by ``tests/test_spec_config.py``.

On the tree before the contract had one owner (commit ce08d81) this found 19 lists in 18 places of 13 files: the
plan table's columns and row (``sweep/messages.py``), the report's CSV columns and row (``report/tables.py``), the
baseline's drops and the none-word keys of the sweep grid (``sweep/grid.py``), the tuner's neighbour steps and
equivalence key (``tune/space.py``, ``tune/proposals.py``), the echo gate's report (``gates/echo.py``), the bench
result's engine section (``bench/server_info.py``), the inventory variables the tools read
(``inventory_values.py``), the simulated engine's short keys, their loop and its echoed arguments (two runs in one
``update`` call; ``simengine/launch_settings.py``), the action plugin's DDTree-only keys
(``plugins/action/ddtree_validate.py``), the readiness module's echo keys (``sglang_wait_ready.py``) and the role's
two mappings of short keys and role variables (``roles/sglang_service/tasks/resolve.yml``).
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import jinja2
import pytest
import yaml
from jinja2 import nodes as jinja_nodes

from repro_py.spec_config import FIELDS

ROOT = Path(__file__).resolve().parents[2]
OWNER = "repro_py/spec_config.py"
#: Where product files live (tests/, molecule/, benchmarks/ and docs are not product).
PYTHON_TREES = ("repro_py", "roles", "plugins")
YAML_GLOBS = ("roles/**/*.yml", "roles/**/*.yaml", "playbooks/**/*.yml", "site.yml", "inventory/**/*.yml",
              "repro_py/**/*.yaml", "repro_py/**/*.yml")  # fmt: skip
JINJA_GLOBS = ("roles/**/*.j2", "repro_py/**/*.j2")
#: Ansible keys whose values are bare Jinja expressions (no braces).
CONDITIONALS = frozenset({"when", "that", "failed_when", "changed_when", "until"})

#: every name of every field -> the field's short key
NAMES: dict[str, str] = {name: f.key for f in FIELDS for name in (f.key, f.role_var, f.flag, f.echo)}
#: the names an attribute can have (a flag has dashes; a role variable is no attribute of anything)
ATTRIBUTE_NAMES = frozenset(name for f in FIELDS for name in (f.key, f.echo))


@dataclasses.dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str
    names: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what} spells {', '.join(self.names)}"


def spelled_runs(items: Sequence[str | None]) -> list[tuple[str, ...]]:
    """The runs of side-by-side names (``None``: an item that names no field) that cover two or more fields."""
    runs: list[tuple[str, ...]] = []
    current: list[str] = []
    for item in [*items, None]:
        if item is not None:
            current.append(item)
            continue
        if len({NAMES[n] for n in current}) >= 2:
            runs.append(tuple(current))
        current = []
    return runs


# ---------------------------------------------------------------- Python


def _python_name(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES:
        return node.value
    if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_NAMES:
        return node.attr
    return None


def _is_literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):  # not a literal (or one Python cannot build, such as {[1]})
        return False
    return True


def _keyed_name(name: str | None, value: ast.expr) -> str | None:
    """A mapping entry names its field only when its value is an expression (a literal value is data)."""
    return None if name is None or _is_literal(value) else name


def python_findings(source: str, path: str) -> list[Finding]:
    found: list[Finding] = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            what, items = f"a {type(node).__name__.lower()}", [_python_name(e) for e in node.elts]
        elif isinstance(node, ast.Dict):
            what = "a dict"
            pairs = zip(node.keys, node.values, strict=True)
            items = [None if k is None else _keyed_name(_python_name(k), v) for k, v in pairs]
        elif isinstance(node, ast.Call) and (
            (isinstance(node.func, ast.Name) and node.func.id == "dict")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "update")
        ):
            what = f"the keywords of {ast.unparse(node.func)}()"
            items = [_keyed_name(k.arg if k.arg in NAMES else None, k.value) for k in node.keywords]
        else:
            continue
        found += [Finding(path, node.lineno, what, run) for run in spelled_runs(items)]
    return found


# ---------------------------------------------------------------- Jinja

_JINJA = jinja2.Environment()


def _jinja_name(node: jinja_nodes.Node) -> str | None:
    if isinstance(node, jinja_nodes.Const) and isinstance(node.value, str) and node.value in NAMES:
        return node.value
    if isinstance(node, jinja_nodes.Name) and node.name in NAMES:
        return node.name
    if isinstance(node, jinja_nodes.Getattr) and node.attr in ATTRIBUTE_NAMES:
        return node.attr
    return None


def _jinja_literal(node: jinja_nodes.Expr) -> bool:
    try:
        node.as_const()
    except jinja_nodes.Impossible:
        return False
    return True


def jinja_findings(text: str, path: str, first_line: int = 1) -> list[Finding]:
    found: list[Finding] = []
    with warnings.catch_warnings():  # Ansible's regexes in Jinja strings ('\.') are no concern of this test
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = _JINJA.parse(text)
    for node in tree.find_all((jinja_nodes.List, jinja_nodes.Tuple, jinja_nodes.Dict)):
        if isinstance(node, jinja_nodes.Dict):
            what = "Jinja dict"
            items = [None if _jinja_literal(p.value) else _jinja_name(p.key) for p in node.items]
        else:
            what, items = f"Jinja {type(node).__name__.lower()}", [_jinja_name(i) for i in node.items]
        found += [Finding(path, first_line + node.lineno - 1, f"a {what}", run) for run in spelled_runs(items)]
    return found


# ---------------------------------------------------------------- YAML


def _is_template(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and ("{{" in node.value or "{%" in node.value)


def _yaml_walk(node: yaml.Node, path: str, key: str | None = None) -> Iterator[Finding]:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode):
        if key in CONDITIONALS and not _is_template(node):
            yield from jinja_findings("{{ " + node.value + " }}", path, line)
        elif _is_template(node):
            yield from jinja_findings(node.value, path, line)
    elif isinstance(node, yaml.SequenceNode):
        names = [i.value if isinstance(i, yaml.ScalarNode) and i.value in NAMES else None for i in node.value]
        yield from (Finding(path, line, "a YAML sequence", run) for run in spelled_runs(names))
        for item in node.value:
            yield from _yaml_walk(item, path, key)
    elif isinstance(node, yaml.MappingNode):
        names = [k.value if k.value in NAMES and _is_template(v) else None for k, v in node.value]
        yield from (Finding(path, line, "a YAML mapping", run) for run in spelled_runs(names))
        for k, v in node.value:
            yield from _yaml_walk(v, path, k.value if isinstance(k, yaml.ScalarNode) else None)


def yaml_findings(text: str, path: str) -> list[Finding]:
    """Composed, not loaded: Ansible's tags (``!vault``, ``!unsafe``) need no constructor, and nodes keep lines."""
    docs = [doc for doc in yaml.compose_all(text, Loader=yaml.SafeLoader) if doc is not None]
    return [finding for doc in docs for finding in _yaml_walk(doc, path)]


# ---------------------------------------------------------------- the product files


def _files(globs: Iterable[str]) -> list[Path]:
    return sorted({p for pattern in globs for p in ROOT.glob(pattern) if p.is_file()})


def product_files() -> list[tuple[Path, Callable[[str, str], list[Finding]]]]:
    python = [p for tree in PYTHON_TREES for p in (ROOT / tree).rglob("*.py")]
    out: list[tuple[Path, Callable[[str, str], list[Finding]]]] = [(p, python_findings) for p in sorted(python)]
    out += [(p, yaml_findings) for p in _files(YAML_GLOBS)]
    out += [(p, jinja_findings) for p in _files(JINJA_GLOBS)]
    return [(p, finder) for p, finder in out if p.relative_to(ROOT).as_posix() != OWNER]


def all_findings() -> list[Finding]:
    return [
        finding
        for path, finder in product_files()
        for finding in finder(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]


# ---------------------------------------------------------------- the finders find


def test_the_python_finder_finds_key_lists_and_leaves_data_alone() -> None:
    source = (
        'A = ("budget", "topk")\n'
        "B = [s.budget, s.topk, s.window]\n"
        'C = {"window", "algorithm"}\n'
        'D = {"speculative_ddtree_budget": info.ddtree_budget, "speculative_draft_window_size": info.window}\n'
        "args.update(speculative_ddtree_budget=spec.budget, speculative_ddtree_topk_cap=spec.topk)\n"
        'E = {"algorithm": "ddtree", "budget": 8, "topk": 4}\n'  # a config: data
        'F = ["the", "budget", "of", "a", "window"]\n'  # words apart: a vocabulary
        'G = ("--speculative-dflash-block-size", "speculative_dflash_block_size")\n'  # one field's two names
        'H = (*KEYS, "sim_fault")\n'
        'SpecConfig(algorithm="ddtree", budget=8, topk=4)\n'  # a constructor names its parameters
    )
    found = python_findings(source, "m.py")
    assert sorted((f.line, f.names) for f in found) == [
        (1, ("budget", "topk")),
        (2, ("budget", "topk", "window")),
        (3, ("window", "algorithm")),
        (4, ("speculative_ddtree_budget", "speculative_draft_window_size")),
        (5, ("speculative_ddtree_budget", "speculative_ddtree_topk_cap")),
    ]
    assert "m.py:1: a tuple spells budget, topk" in map(str, found)


def test_the_yaml_and_jinja_finders_find_key_lists_and_leave_data_alone() -> None:
    text = (
        "explicit:\n"
        '  budget: "{{ budget | default(none) }}"\n'
        '  topk: "{{ topk | default(none) }}"\n'
        "defaults:\n"  # plain values: data
        "  sglang_service_ddtree_budget: 8\n"
        "  sglang_service_ddtree_topk: 4\n"
        "keys: [speculative_ddtree_budget, speculative_ddtree_topk_cap]\n"
        "flags: \"{{ ['--speculative-ddtree-budget', x, '--speculative-ddtree-topk-cap'] }}\"\n"  # apart
        "when: item in [sglang_service_ddtree_budget, sglang_service_draft_window]\n"
        "row: \"{{ {'budget': spec.budget, 'window': spec.window} }}\"\n"
        "config: \"{{ {'budget': 8, 'window': 2048} }}\"\n"  # literal values: data
    )
    found = yaml_findings(text, "t.yml")
    assert sorted((f.line, f.what, f.names) for f in found) == [
        (2, "a YAML mapping", ("budget", "topk")),  # a mapping's line is its first entry's
        (7, "a YAML sequence", ("speculative_ddtree_budget", "speculative_ddtree_topk_cap")),
        (9, "a Jinja list", ("sglang_service_ddtree_budget", "sglang_service_draft_window")),
        (10, "a Jinja dict", ("budget", "window")),
    ]
    template = "line one\n{% for k in ['block_size', 'window'] %}{{ k }}{% endfor %}\n"
    assert [(f.line, f.names) for f in jinja_findings(template, "x.j2")] == [(2, ("block_size", "window"))]


def test_every_kind_of_product_file_is_read() -> None:
    paths = {p.relative_to(ROOT).as_posix() for p, _ in product_files()}
    for expected in ("plugins/action/ddtree_validate.py", "plugins/modules/sglang_wait_ready.py",
                     "roles/sglang_service/tasks/resolve.yml", "roles/sglang_service/templates/etc/systemd/system/"
                     "sglang.service.j2", "repro_py/tune/default_space.yaml", "site.yml"):  # fmt: skip
        assert expected in paths
    assert OWNER not in paths


# ---------------------------------------------------------------- the rule holds


@pytest.fixture(scope="module")
def findings() -> list[Finding]:
    return all_findings()


def test_no_product_file_spells_a_list_of_the_contract_s_fields(findings: list[Finding]) -> None:
    assert not findings, (
        f"key lists of the config contract spelled by hand (derive them from {OWNER}'s FIELDS: "
        "fields_of/keys_of/dropped_keys, SETTINGS, ROLE_VARS; the role from what ddtree_validate returns):\n"
        + "\n".join(map(str, findings))
    )
