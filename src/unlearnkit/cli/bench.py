"""``unlearnkit bench SUITE.yaml``: a plain function with typer defaults, registered in cli/__init__.py."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import validate
from ..errors import UserError

DEFAULT_DB = "results/unlearnkit.db"


def bench_command(
    *,
    suite_file: Path = typer.Argument(..., metavar="SUITE.yaml", help="benchmark suite, e.g. "
                                      "benchmarks/configs/cpu.yaml"),
    db: Optional[Path] = typer.Option(None, help=f"results store (SQLite); default: the suite's db, else {DEFAULT_DB}"),
    out: Optional[Path] = typer.Option(None, help="folder for each cell's run files; default: the suite's out, "
                                                  "else results/<suite>"),
    jobs: int = typer.Option(1, help="cells in parallel: local worker processes (with --executor ray: the "
                                     "CPUs of the local Ray)"),
    executor: str = typer.Option("local", help="local | ray"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address (ray://host:10001 or host:6379); "
                                                     "default: a local Ray"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    dry_run: bool = typer.Option(False, "--dry-run", help="list the cells and what is finished; run nothing"),
    progress: bool = typer.Option(True, help="show the progress bar"),
):
    """Run a benchmark grid into the results store; finished cells are kept, the next call resumes."""
    from rich.console import Console

    from ..bench.cell import Machine
    from ..bench.executors import make_executor
    from ..bench.grid import check_tasks, load_suite
    from ..bench.runner import run_bench
    from ..bench.store import ResultStore
    from ..runtime import resolve_device
    from ..training import check_cache_dir

    suite = load_suite(suite_file)
    db_path = Path(db or suite.db or DEFAULT_DB)
    out_dir = Path(out or suite.out or Path("results") / suite.name)  # a suite's name is a plain file name
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    # what the run would refuse, a dry run refuses too (class 99, --jobs 0, --executor bogus, a device)
    validate.whole("--jobs", jobs, low=1)
    ex = make_executor(executor, jobs, address)
    resolve_device(device)  # an unknown device fails now, not in every cell
    check_tasks(suite, data_dir)  # forget classes the dataset has, indices files: before the store is written
    if dry_run:  # writes nothing: the locations are not checked for writing
        return _dry_run(suite, db_path)
    validate.output_file("--db", db_path)  # before any cell runs: a store that cannot be written loses them
    validate.output_dir("--out", out_dir)
    check_cache_dir("--cache-dir", cache_dir)
    machine = Machine(out=str(out_dir), cache_dir=str(cache_dir) if cache_dir else None, device=device,
                      data_dir=str(data_dir), download=download)
    with ResultStore(db_path, exclusive=True) as store:
        summary = run_bench(suite, store, ex, machine, progress=progress, console=console)
    typer.echo(f"{summary.done} cells run, {summary.skipped} finished before, {len(summary.failed)} failed "
               f"in {summary.wall_s:.0f}s; store {db_path}")
    if summary.failed:
        typer.echo(f"error: {len(summary.failed)} cell(s) failed (their log.txt under {out_dir} says why); "
                   f"the next call retries them", err=True)
        raise typer.Exit(1)
    typer.echo(f"next: unlearnkit report --db {db_path} --out {Path('results') / 'report'}")
    return summary


def _dry_run(suite, db_path: Path):
    from collections import Counter

    done = set()
    if db_path.exists():  # no store yet: nothing finished (and none is created); a folder: UserError
        from ..bench.store import ResultStore

        with ResultStore(db_path, create=False) as store:  # read-only: a dry run writes nothing
            done = store.finished()
    per_grid = Counter(c.grid for c in suite.cells)
    fin = Counter(c.grid for c in suite.cells if c.cell_id in done)
    for grid, n in per_grid.items():
        typer.echo(f"{grid}: {n} cells ({fin[grid]} finished)")
    typer.echo(f"{suite.name}: {len(suite.cells)} cells, {len(done & {c.cell_id for c in suite.cells})} finished")
    if not suite.cells:
        raise UserError("the suite has no cells")
    return None
