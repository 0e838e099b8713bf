"""``unlearnkit list``: what is registered (datasets, models, methods, metrics).

``list methods --markdown`` prints the method catalogue as Markdown instead (the page docs/methods.md,
built by :func:`unlearnkit.methods.catalog.methods_markdown`); ``--out FILE`` writes it there atomically.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import validate
from ..errors import UserError

KINDS = ("datasets", "models", "methods", "metrics")


def list_command(what: str = typer.Argument("all", help="datasets | models | methods | metrics | all"),
                 markdown: bool = typer.Option(False, "--markdown",
                                               help="methods only: print the catalogue as a Markdown page"),
                 out: Optional[Path] = typer.Option(None, help="with --markdown: write the page to this file, "
                                                               "e.g. docs/methods.md")):
    """List what is registered."""
    what = what.lower()
    if what != "all" and what not in KINDS:
        raise UserError(f"unknown list {what!r}; choose one of {', '.join(KINDS)} or all")
    if markdown or out is not None:
        _markdown(what, markdown, out)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for kind in KINDS if what == "all" else (what,):
        table = Table(title=kind, show_lines=False)
        table.add_column("name")
        table.add_column("aliases" if kind == "methods" else "", style="dim")
        table.add_column("what / reference")
        for name, aliases, info in _listing(kind):
            table.add_row(name, aliases, info)
        console.print(table)


def _markdown(what: str, markdown: bool, out: Optional[Path]) -> None:
    """``list methods --markdown [--out FILE]``: the page on stdout, or written atomically to ``FILE``."""
    if markdown and what != "methods":
        raise UserError(f"--markdown is only for 'unlearnkit list methods', not {what!r}")
    if not markdown:
        raise UserError("--out is only for the Markdown page: unlearnkit list methods --markdown --out FILE")
    from ..checkpoints import atomic_write_text
    from ..methods.catalog import methods_markdown

    if out is None:
        typer.echo(methods_markdown(), nl=False)
        return
    path = validate.output_file("--out", out)
    atomic_write_text(path, methods_markdown())
    typer.echo(f"wrote {path}")


def _listing(kind: str):
    if kind == "datasets":
        from ..data.datasets import DATASET_INFO

        return [(n, "", i) for n, i in DATASET_INFO.items()] + [
            ("imagefolder:<path>", "", "your own images: <path>/train/<class>/*, <path>/test/<class>/*")]
    if kind == "models":
        from ..models.zoo import MODEL_INFO

        return [(n, "", i) for n, i in MODEL_INFO.items()] + [
            ("torchvision:<name>", "", "any torchvision classification model (random init)"),
            ("timm:<name>", "", "any timm model, e.g. timm:swin_tiny_patch4_window7_224 (random init)")]
    if kind == "methods":
        from ..methods import METHODS

        return [(n, ", ".join(METHODS.aliases_of(n)), METHODS.get(n).paper) for n in METHODS.names()]
    from ..metrics import METRIC_INFO

    return [(n, "", i) for n, i in METRIC_INFO.items()]
