"""README.md is a manual: the two commands first, at most 250 lines, every link resolving.

The design record, the generated variable table, the sample reports, figures and
stage times live under docs/ (README.md's "Documentation" table links each page).
These checks fail on the README.md of 878 lines that carried the variable table
and the design record (the layout before the move to docs/): the line count, the
table check and the docs-pages check (it did not link docs/architecture.md) fail
there. The link check holds README.md, docs/*.md, REPRODUCE.md, patches/README.md
and the role READMEs to files and headings that exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINKED_PAGES = [README, *DOCS, ROOT / "REPRODUCE.md", ROOT / "patches" / "README.md",
                *sorted(ROOT.glob("roles/*/README.md"))]  # fmt: skip
TABLE_MARKER = "<!-- BEGIN ROLE VARIABLES"

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a heading or a link inside a fence is sample text)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, repeated headings numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose_lines(path.read_text()):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file (code blocks and inline code left out)."""
    targets = []
    for line in _prose_lines(path.read_text()):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                targets.append(target)
    return targets


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """The links of ``path`` whose file, or heading in that file, does not exist."""
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no file {_shown(dest)})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {_shown(dest)})")
    return broken


def test_readme_is_a_manual_of_at_most_250_lines():
    count = len(README.read_text().splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines; a manual has at most {MAX_LINES} (move the rest to docs/)"


def test_readme_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", lines[:2]
    assert lines[2] == "```sh" and lines[5] == "```", lines[:6]
    assert lines[3].startswith("make demo   # "), lines[3]
    assert lines[4].startswith("make test   # "), lines[4]


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = broken_links(page)
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    unlinked = [str(p.relative_to(ROOT)) for p in DOCS if p.resolve() not in linked]
    assert not unlinked, f"docs pages README.md does not link: {unlinked}"


def test_the_variable_table_is_in_docs_not_in_the_readme():
    readme = README.read_text()
    assert TABLE_MARKER not in readme
    names = set()
    for spec in ROOT.glob("roles/*/meta/argument_specs.yml"):
        names |= set(yaml.safe_load(spec.read_text())["argument_specs"]["main"].get("options", {}))
    rows = [line for line in readme.splitlines() if any(line.startswith(f"| `{name}` |") for name in names)]
    assert not rows, f"README.md carries rows of the variable table: {rows[:3]}"
    assert TABLE_MARKER in (ROOT / "docs" / "variables.md").read_text()


def test_the_link_check_sees_a_broken_link_and_a_missing_heading(tmp_path):
    """The checker itself: a missing file, a missing heading and a missing image are reported, good ones not."""
    (tmp_path / "a.md").write_text("# Title\n\n## The `x` part: one, two\n\n```\n## not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#the-x-part-one-two) [ok](#local) `[skipped](gone.md)`\n"
        "[gone](gone.md) [no heading](a.md#not-a-heading) ![img](missing.png) [web](https://example.com/x)\n"
        "## Local\n"
    )
    assert anchors(tmp_path / "a.md") == {"title", "the-x-part-one-two"}
    reported = " ".join(broken_links(page))
    assert "gone.md" in reported and "#not-a-heading" in reported and "missing.png" in reported
    assert "the-x-part-one-two" not in reported and "#local" not in reported and "example.com" not in reported
