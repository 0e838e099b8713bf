"""``unlearnkit report``: a plain function with typer defaults, registered in cli/__init__.py."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UserError


def report_command(
    *,
    db: List[Path] = typer.Option([], "--db", help="results store written by `unlearnkit bench`; repeat for several "
                                                   "(default results/unlearnkit.db when no --results is given)"),
    results: List[Path] = typer.Option([], "--results", help="a results.json written by `unlearnkit run` "
                                                             "(or its folder); repeat for several"),
    out: Path = typer.Option(Path("results/report"), help="folder for report.html, report.md and the CSVs"),
    title: str = typer.Option("unlearnkit benchmark report", help="the report's title"),
    leaderboard: Optional[Path] = typer.Option(None, help="also write the leaderboard tables alone to this Markdown "
                                                          "file (e.g. docs/leaderboard.md)"),
    forgetting_quality: List[Path] = typer.Option([], "--forgetting-quality", help="forgetting_quality.json of "
                                                  "`unlearnkit forgetting-quality` (or a folder holding them); "
                                                  "repeat for several: a leaderboard column"),
):
    """Tables in the seed papers' layouts, plots, and a self-contained report.html (+ .md, .csv)."""
    from .. import validate
    from ..report.build import make_report
    from ..report.fq import load_forgetting_quality
    from ..report.records import load_records

    validate.output_dir("--out", out)  # before any work: a report that cannot be written fails first
    if leaderboard is not None:
        validate.output_file("--leaderboard", leaderboard)
    dbs = list(db)
    if not dbs and not results:
        dbs = [Path("results/unlearnkit.db")]
        if not dbs[0].is_file():
            raise UserError("no results store at results/unlearnkit.db: give --db PATH (written by "
                            "`unlearnkit bench`) or --results path/to/results.json")
    for path in dbs:
        validate.input_file("--db", path)
    fq = load_forgetting_quality(list(forgetting_quality)) if forgetting_quality else None
    stores, runs = [], []
    if dbs:
        from ..bench.store import ResultStore

        for path in dbs:
            with ResultStore(path, create=False) as store:  # the store is only read (opened read-only)
                stores.append((path, store.rows()))
                runs += store.runs()
    records, repeated = load_records(None, list(results), stores=stores)
    sources = [f"store {p}" for p in dbs] + [str(p) for p in results] + \
        [f"forgetting quality {p}" for p in forgetting_quality]
    paths = make_report(records, out, sources, title, runs or None, leaderboard=leaderboard, fq=fq)
    if repeated:
        typer.echo(f"note: {repeated} repeated row(s) (same task, seed and method) counted once", err=True)
    typer.echo(f"wrote {paths['html']}, {paths['md'].name}, {paths['summary'].name} and {paths['cells'].name} "
               f"({len(paths['tables'])} tables, {len(paths['figures'])} figures)")
    return paths
