"""The command line: a thin layer over the Python API (``unlearnkit --help``), one module per command.

Every command is a plain function with typer defaults, registered here on the one app
(:mod:`.app`), which turns bad input into one ``error:`` line and exit code 2. Library packages
hold no CLI code.
"""
from __future__ import annotations

from .app import Command, app, handles_errors, main
from .audit import audit_command
from .bench import bench_command
from .forgetting_quality import forgetting_quality_command
from .listing import list_command
from .report import report_command
from .run import run_command
from .stream import stream_command
from .train import train_command
from .tune import tune_command
from .unlearn import unlearn_command

COMMANDS = {"list": list_command, "train": train_command, "run": run_command, "unlearn": unlearn_command,
            "audit": audit_command, "bench": bench_command, "report": report_command,
            "forgetting-quality": forgetting_quality_command, "tune": tune_command,
            "stream": stream_command}
for _name, _fn in COMMANDS.items():
    app.command(_name, help=_fn.__doc__, cls=Command)(handles_errors(_fn))

__all__ = ["COMMANDS", "app", "main"]
