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
