"""The typer app every command registers on, and how a command fails.

Bad input ends in one line on stderr and exit code 2 (a :class:`UserError`, a diverged method, or
one of click's own usage errors); Ctrl-C keeps finished checkpoints (the next run resumes from the
cache) and exits 130. Under ``torchrun`` an error line comes from the first process of each node
only (the others fail alike).
"""
from __future__ import annotations

import functools
import inspect
import math
import os
import sys

import click
import typer
import typer.core
from typer.core import TyperGroup

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


# recent typer vendors its own copy of click (typer._click); older ones use click itself
_CLICK = tuple({click, getattr(typer.core, "_click", click)})
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


def main() -> None:
    from ..runtime import tune_cpu_allocator

    tune_cpu_allocator()  # before any tensor: evaluation batches reuse freed memory (no page faults)
    try:
        app()
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)
