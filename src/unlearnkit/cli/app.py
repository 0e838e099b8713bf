"""The typer app every command registers on, and how a command fails.

Bad input ends in one line on stderr and exit code 2 (a :class:`UserError`, a diverged method, or
one of click's own usage errors); Ctrl-C keeps finished checkpoints (the next run resumes from the
cache) and exits 130. Under ``torchrun`` an error line comes from the first process of each node
only (the others fail alike).
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import sys

import click
import typer
import typer.core
from typer.core import TyperGroup

from .._version import __version__
from ..errors import NonFiniteLossError, UserError


def _err(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0" or os.environ.get("LOCAL_RANK", "0") == "0":
        typer.echo(f"error: {' '.join(str(msg).split())}", err=True)


class OneLineErrors(TyperGroup):
    """click's usage errors (a missing option, ``--epochs abc``, ``--jobs 0``) as one ``error:`` line,
    exit code 2, like every other bad input (click would print a usage box of several lines)."""

    def make_context(self, *args, **kwargs):
        return _one_line(super().make_context, *args, **kwargs)

    def invoke(self, ctx):
        return _one_line(super().invoke, ctx)

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not ctx.resilient_parsing:
            refuse_repeated(cmd, name, rest, ctx)
        return name, cmd, rest


def refuse_repeated(cmd, name: str, args: list[str], parent) -> None:
    """An option that takes one value, given twice (``--seed 0 --seed 1``), is a usage error: click would
    keep the last one silently. Options meant to repeat (``multiple``: ``--retrained``, ``--db``...) may."""
    sub = cmd.context_class(cmd, info_name=name, parent=parent)
    _, _, order = cmd.make_parser(sub).parse_args(args=list(args))  # what the command's own parse will see
    seen = set()
    for param in order:
        if param.param_type_name != "option" or param.multiple or getattr(param, "count", False):
            continue
        if param.name in seen:
            shown = "/".join([*param.opts, *getattr(param, "secondary_opts", [])])
            raise _USAGE_ERRORS[0](f"{shown} is given more than once; give it once", ctx=sub)
        seen.add(param.name)


# recent typer vendors its own copy of click (typer._click); older ones use click itself
_CLICK = tuple({getattr(typer.core, "_click", click): None, click: None})  # typer's own first
_CLICK_ERRORS = tuple(m.exceptions.ClickException for m in _CLICK)
_USAGE_ERRORS = tuple(m.exceptions.UsageError for m in _CLICK)


def _one_line(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except _CLICK_ERRORS as e:
        msg = e.format_message()
        if isinstance(e, _USAGE_ERRORS) and e.ctx is not None and e.ctx.command_path:
            msg += f" (see {e.ctx.command_path} --help)"
        _err(msg)
        raise typer.Exit(e.exit_code) from None


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Make an image classifier forget, then certify whether it really forgot.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"unlearnkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """The options before any command (``--version``); a command's library messages are shown (:func:`show_logs`)."""
    show_logs()


class _ConsoleHandler(logging.Handler):
    """The library's log records on the shared stderr console, as written (no rich markup read in them);
    warnings in yellow."""

    def emit(self, record: logging.LogRecord) -> None:
        from rich.markup import escape

        from ..progress import console

        try:
            style = "yellow" if record.levelno >= logging.WARNING else None
            console.print(escape(self.format(record)), style=style, highlight=False)
        except Exception:  # a handler never raises into the code that logged
            self.handleError(record)


def show_logs() -> None:
    """Show the ``unlearnkit`` logger's records from INFO up on stderr (once per process), as the CLI's output."""
    logger = logging.getLogger("unlearnkit")
    if not any(isinstance(h, _ConsoleHandler) for h in logger.handlers):
        logger.addHandler(_ConsoleHandler())
        logger.setLevel(logging.INFO)


def _check_finite(fn, args, kwargs) -> None:
    """Every float option must be a finite number (click reads ``nan`` and ``inf`` as floats)."""
    bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    for name, value in bound.arguments.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--{name.rstrip('_').replace('_', '-')} must be a finite number, not {value}")


def handles_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            _check_finite(fn, args, kwargs)
            return fn(*args, **kwargs)
        except UserError as e:
            _err(str(e))
            raise typer.Exit(2) from None
        except NonFiniteLossError as e:  # a hyperparameter too large for this model: also the user's to fix
            _err(str(e))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            _err("interrupted: finished checkpoints are kept; run the same command again to resume")
            raise typer.Exit(130) from None

    return wrapper


def _only_help(args: list[str]) -> bool:
    """True when the command line only asks for help or the version (nothing will compute)."""
    return not args or "--help" in args or "--version" in args


def main() -> None:
    if not _only_help(sys.argv[1:]):  # --help / --version stay fast: the runtime module imports torch
        from ..runtime import tune_cpu_allocator

        tune_cpu_allocator()  # before any tensor: evaluation batches reuse freed memory (no page faults)
    try:
        app()
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)
