"""Progress bars on stderr (rich), silenced with ``UNLEARNKIT_PROGRESS=0`` or ``enabled=False``."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def progress_enabled() -> bool:
    return os.environ.get("UNLEARNKIT_PROGRESS", "1") not in ("0", "false", "no")


class _Bar:
    def __init__(self, progress: Progress | None, task) -> None:
        self._p, self._t = progress, task

    def update(self, advance: int = 1, **postfix) -> None:
        if self._p is None:
            return
        info = "  ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in postfix.items())
        self._p.update(self._t, advance=advance, info=info)


@contextmanager
def bar(total: int, description: str, enabled: bool = True, on: Console | None = None) -> Iterator[_Bar]:
    """A progress bar on ``on`` (default: the shared stderr console)."""
    if not (enabled and progress_enabled()):
        yield _Bar(None, None)
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn(), TextColumn("{task.fields[info]}")]
    with Progress(*columns, console=on or console, transient=False) as p:
        yield _Bar(p, p.add_task(description, total=total, info=""))


#: the widest a table printed on the terminal may be (a wider one wraps every row of it)
TABLE_WIDTH = 100
#: the narrowest a column of free text (a verdict line) is made before the table is split in two
WRAP_MIN = 16


def print_table(title: str, header: list[str], rows: list[list[str]], *, right: set[int] = frozenset(),
                wrap: set[int] = frozenset(), order: list[int] | None = None, width: int | None = None,
                file=None) -> int:
    """Print a table on stdout at most :data:`TABLE_WIDTH` columns wide (the terminal's width when smaller);
    returns how many tables it took. Column 0 labels the rows; the columns come in order of importance
    (or ``order`` gives it: column indices, 0 first).
    Columns in ``wrap`` (free text such as a verdict line) wrap inside their cells; the others never do (a
    number folded in two is misread). When the columns do not fit side by side, the later ones go to a
    further table below (``title (continued)``), each led by column 0 again. Every cell is printed literally
    (no rich markup is read in it). ``right``: columns aligned right (numbers)."""
    import shutil
    import sys

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    limit = width or min(TABLE_WIDTH, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns
                         if sys.stdout.isatty() else TABLE_WIDTH)
    out = Console(width=limit, file=file, highlight=False)

    def need(i: int) -> int:
        """The width column ``i`` cannot go below: its longest cell (a wrapped column: its longest word, or
        :data:`WRAP_MIN`), and its header's longest word (a header wraps between words)."""
        cells = [str(r[i]) for r in rows]
        words = [w for text in [*cells, header[i]] for w in text.split()] or [""]
        if i in wrap:
            return max(max(map(len, words)), min(WRAP_MIN, max(map(len, cells), default=0)))
        return max(max((len(c) for c in cells), default=0), max(map(len, header[i].split() or [""])))

    def build(cols: list[int], part: str) -> Table:
        table = Table(title=Text(title + part), box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                      title_justify="left", min_width=min(limit, len(title + part)))  # the title on one line
        for i in cols:  # headers wrap by words; a cell outside ``wrap`` keeps its whole width
            table.add_column(Text(header[i]), justify="right" if i in right else "left", overflow="fold",
                             **({"min_width": need(i)} if i in wrap else {"width": need(i)}))
        for r in rows:
            table.add_row(*(Text(str(r[i])) for i in cols))
        return table

    def fits(cols: list[int]) -> bool:
        return sum(need(i) for i in cols) + 3 * len(cols) + 1 <= limit  # each column's padding and rule

    groups: list[list[int]] = []
    current = [0]
    for i in [c for c in (order or range(len(header))) if c != 0]:
        if fits(current + [i]) or len(current) == 1:
            current.append(i)
        else:
            groups.append(current)
            current = [0, i]
    groups.append(current)
    for n, cols in enumerate(groups):
        out.print(build(cols, "" if n == 0 else " (continued)"))
    return len(groups)
