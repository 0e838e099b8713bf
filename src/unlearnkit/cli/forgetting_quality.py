"""``unlearnkit forgetting-quality``: option parsing and printing only, registered in cli/__init__.py.

The work is :func:`unlearnkit.forgetting_quality_experiment.forgetting_quality`.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError

_PAIR = re.compile(r"^\s*([^=,\s][^=,]*?)\s*=\s*(\d+)\s*$")


def parse_runs_for(text: str | None) -> dict[str, int]:
    """``"ec+cola=4,salun=8"`` -> ``{"ec+cola": 4, "salun": 8}``."""
    if not text:
        return {}
    out: dict[str, int] = {}
    for part in text.split(","):
        m = _PAIR.match(part)
        if not m:
            raise UserError(f"--runs-for takes method=count pairs separated by commas (e.g. "
                            f"ec+cola=4,salun=8), not {text!r}")
        if m.group(1) in out:
            raise UserError(f"--runs-for names {m.group(1)!r} twice")
        out[m.group(1)] = int(m.group(2))
    return out


def forgetting_quality_command(
    *,
    dataset: str = typer.Option(..., help="dataset name (unlearnkit list datasets)"),
    model: str = typer.Option("small_cnn", help="model name (unlearnkit list models)"),
    forget_classes: Optional[str] = typer.Option(None, help="classes to forget, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count"),
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: a random fraction in (0, 0.5) of "
                                                   "train gets another class's label (the split run "
                                                   "--forget-flipped makes); scored on those labels"),
    methods: str = typer.Option(..., help="comma-separated method names, e.g. finetune,salun"),
    runs: int = typer.Option(32, help="models on each side (unlearned runs per method, retrained models); "
                                      ">= 3"),
    runs_for: Optional[str] = typer.Option(None, help="fewer runs for slow methods, e.g. ec+cola=4,salun=8 "
                                                      "(compared with the first n retrained models)"),
    seed: int = typer.Option(0, help="the original's training seed; retrains and runs use seed+1, "
                                     "seed+2, ..."),
    data_seed: int = typer.Option(0, help="seed of the train/val/test split and of a random forget set"),
    epochs: Optional[int] = typer.Option(None, help="override the training recipe's epochs"),
    preset: str = typer.Option("auto", help="method defaults: auto | small | reference"),
    out: Path = typer.Option(Path("runs/forgetting_quality"), help="output folder"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    jobs: int = typer.Option(1, help="jobs in parallel: local worker processes (with --executor ray: the "
                                     "CPUs of the local Ray)"),
    executor: str = typer.Option("local", help="local | ray"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address; default: a local Ray"),
    controls: bool = typer.Option(True, help="also score the controls: more retrained models (the top of the "
                                             "scale) and the original itself (the bottom)"),
    progress: bool = typer.Option(True, help="show the progress bar"),
):
    """The NeurIPS 2023 unlearning challenge's forgetting quality of methods (N runs each vs N retrains).

    Writes forgetting_quality.json/.md/.png into --out; the next call reuses finished jobs (<out>/jobs).
    """
    from ..forgetting_quality_experiment import JobsFailedError, forgetting_quality

    try:
        results = forgetting_quality(
            dataset=dataset, model=model, forget_classes=forget_classes, forget_random=forget_random,
            forget_flipped=forget_flipped, methods=methods, runs=runs, runs_for=parse_runs_for(runs_for), seed=seed,
            data_seed=data_seed, epochs=epochs, preset=preset, out=out, cache_dir=cache_dir, data_dir=data_dir,
            download=download, device=device, jobs=jobs, executor=executor, address=address, controls=controls,
            progress=progress)
    except JobsFailedError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    _print_table(results)
    jobs_info = results["provenance"]["jobs"]
    typer.echo(f"{jobs_info['run']} jobs run, {jobs_info['reused']} reused, "
               f"{results['provenance']['wall_s']:.0f}s")
    typer.echo(f"wrote {out / 'forgetting_quality.json'}, forgetting_quality.md and forgetting_quality.png")
    return results


def _print_table(results: dict) -> None:
    """The scores as a table; method and dataset names printed literally."""
    from ..forgetting_quality_experiment import table_rows
    from ..progress import print_table

    header, rows = table_rows(results)
    t = results["task"]
    title = f"forgetting quality: {t['dataset']} / {t['model']}, {results['config']['runs']} runs each side"
    print_table(title, header, rows, right=set(range(1, len(header))))  # at most 100 columns wide
