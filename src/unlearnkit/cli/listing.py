"""``unlearnkit list``: what is registered (datasets, models, methods, metrics)."""
from __future__ import annotations

import typer

from ..errors import UserError


def list_command(what: str = typer.Argument("all", help="datasets | models | methods | metrics | all")):
    """List what is registered."""
    from rich.console import Console
    from rich.table import Table

    what = what.lower()
    kinds = ("datasets", "models", "methods", "metrics")
    if what != "all" and what not in kinds:
        raise UserError(f"unknown list {what!r}; choose one of {', '.join(kinds)} or all")
    console = Console()
    for kind in kinds if what == "all" else (what,):
        table = Table(title=kind, show_lines=False)
        table.add_column("name")
        table.add_column("aliases" if kind == "methods" else "", style="dim")
        table.add_column("what / reference")
        for name, aliases, info in _listing(kind):
            table.add_row(name, aliases, info)
        console.print(table)


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

