"""One Markdown (GFM) table writer for results.md, audit.md, the Mirage table and report.md."""
from __future__ import annotations

from typing import Sequence


def _cell(c: str) -> str:
    return str(c).replace("|", "\\|")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The table's lines: header, separator, one line per row; ``|`` inside a cell is escaped."""
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(_cell, r)) + " |" for r in rows]
    return lines
