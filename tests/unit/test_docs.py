"""The documentation holds together: the generated methods page is current, README.md stays short and
links every page, no relative link or anchor points nowhere, and ``list methods --markdown`` works."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unlearnkit.cli import app
from unlearnkit.methods.catalog import methods_markdown

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
MAX_README_LINES = 250

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def prose(path: Path) -> str:
    """The file's text without fenced code blocks and inline code (links there are not links)."""
    return INLINE_CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))


def links(path: Path) -> list[str]:
    """Every link target of a Markdown file, images included."""
    return LINK.findall(prose(path))


def is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, inline markup and punctuation dropped, spaces -> '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path`` (a repeated one gets ``-1``, ``-2``, ...)."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(text):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def test_methods_page_is_generated_from_the_registry():
    page = DOCS / "methods.md"
    assert page.exists(), "docs/methods.md is missing: run `make docs`"
    assert page.read_text(encoding="utf-8") == methods_markdown(), \
        "docs/methods.md is stale (the method registry changed): run `make docs`"


def test_methods_page_has_one_row_per_method_and_escapes_pipes():
    from unlearnkit.methods import METHODS

    rows = [line for line in methods_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) == len(METHODS)
    for name in METHODS.names():
        assert any(row.startswith(f"| `{name}` |") for row in rows), name
    # every row has exactly the header's six cells: a '|' inside a cell would add one unless escaped
    for row in rows:
        assert len(re.split(r"(?<!\\)\|", row)) == 6 + 2, row


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}): move detail to docs/"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t.split("#")[0]).resolve() for t in links(README) if not is_external(t)}
    missing = [p.name for p in PAGES if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_existing_files_and_headings(path):
    broken = []
    for target in links(path):
        if is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not broken, f"{path.name}: {broken}"


def test_every_page_starts_with_a_title_and_a_link_back_to_the_readme():
    for page in PAGES:
        head = page.read_text(encoding="utf-8").split("\n\n")[:2]
        assert head[0].startswith("# "), page.name
        assert "](../README.md)" in head[1], f"{page.name}: its first paragraph should link back to README.md"


def test_slug_follows_github():
    assert slug("Measured here: `cpu.yaml`, killed and resumed") == "measured-here-cpuyaml-killed-and-resumed"
    assert slug("The audit's cost") == "the-audits-cost"
    assert slug("Troubleshooting: what a mistake looks like") == "troubleshooting-what-a-mistake-looks-like"


# --- unlearnkit list methods --markdown ------------------------------------------------------------

runner = CliRunner()


def test_list_methods_markdown_writes_the_page(tmp_path):
    out = tmp_path / "sub" / "methods.md"
    result = runner.invoke(app, ["list", "methods", "--markdown", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == methods_markdown()
    assert [p.name for p in out.parent.iterdir()] == ["methods.md"]  # no temporary file left behind


def test_list_methods_markdown_prints_the_page_without_out():
    result = runner.invoke(app, ["list", "methods", "--markdown"])
    assert result.exit_code == 0, result.output
    assert result.stdout == methods_markdown()


@pytest.mark.parametrize("args", [["list", "datasets", "--markdown"], ["list", "all", "--markdown"],
                                  ["list", "methods", "--out", "x.md"]])
def test_markdown_is_only_for_methods(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not (tmp_path / "x.md").exists()


def test_list_methods_markdown_refuses_a_folder_as_out(tmp_path):
    result = runner.invoke(app, ["list", "methods", "--markdown", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "folder" in result.stderr, result.stderr
