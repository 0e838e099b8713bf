"""Drive a suite: skip finished cells, run the rest on an executor, store each as it finishes.

Live progress on stderr: cells done / to do, the running cell(s), elapsed time and ETA; one line
per finished cell. Every finished cell is committed before the next event is handled, so
Ctrl-C or ``kill -9`` loses at most the cells that were running.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.markup import escape

from ..progress import bar
from .cell import Machine
from .grid import Suite
from .store import ResultStore


@dataclass
class BenchSummary:
    run_id: int
    total: int
    skipped: int
    done: int = 0
    failed: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def run_bench(suite: Suite, store: ResultStore, executor, machine: Machine, progress: bool = True,
              console: Console | None = None) -> BenchSummary:
    console = console or Console(stderr=True, highlight=False)
    finished = store.finished()
    todo = [c for c in suite.cells if c.cell_id not in finished]
    skipped = len(suite.cells) - len(todo)
    run_id = store.begin_run(suite.name, suite.path, len(suite.cells), skipped, executor.name,
                             getattr(executor, "jobs", 0) or 0)
    summary = BenchSummary(run_id, len(suite.cells), skipped)
    console.print(escape(f"bench {suite.name}: {len(suite.cells)} cells, {skipped} finished before, {len(todo)} "
                         f"to run ({executor.name}); store {store.path}"))
    t0 = time.perf_counter()
    running: dict[str, str] = {}
    try:
        if todo:
            executor.start()  # workers first: no progress-bar thread runs when they fork
        with bar(len(todo), escape(f"bench {suite.name}"), enabled=progress, on=console) as b:
            for event, cell, result in executor.run(todo, machine):
                if event == "start":
                    running[cell.cell_id] = escape(cell.describe())
                    b.update(0, running=" | ".join(running.values()))
                    continue
                running.pop(cell.cell_id, None)
                n = summary.done + len(summary.failed) + 1
                if result.get("ok"):
                    store.record_cell(cell, result, run_id)
                    summary.done += 1
                    verdicts = ", ".join(f"{e['entry']} {e['verdict']}" for e in result["entries"] if e.get("verdict"))
                    console.print(escape(f"[{n}/{len(todo)}] {cell.describe()}: done in {result['wall_s']:.1f}s"
                                         + (f" ({verdicts})" if verdicts else "")))
                else:
                    store.record_failure(cell, result.get("traceback") or result["error"], run_id)
                    summary.failed.append(cell.describe())
                    console.print(escape(f"[{n}/{len(todo)}] {cell.describe()}: ") + "[red]FAILED[/] "
                                  + escape(str(result["error"])))
                b.update(1, running=" | ".join(running.values()))
    finally:
        summary.wall_s = time.perf_counter() - t0
        store.end_run(run_id, summary.wall_s)
    return summary
