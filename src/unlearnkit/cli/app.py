"""The typer app every command registers on, and how a command fails.

Bad input ends in one line on stderr and exit code 2 (a :class:`UserError`, a diverged method, or
one of click's own usage errors); a file the machine cannot write (a full disk, a quota, a read-only
file system: :class:`~unlearnkit.errors.WriteFailed`) in one line and exit code 1, with nothing partial
left; Ctrl-C keeps finished checkpoints (the next run resumes from the cache) and exits 130. Under
``torchrun`` an error line comes from the first process of each node only (the others fail alike).
"""
from __future__ import annotations

import errno
import functools
import inspect
import logging
import math
import os
import sys

import click
import typer
import typer.core
from typer.core import TyperCommand, TyperGroup

from .._version import __version__
from ..errors import NonFiniteLossError, UserError, WriteFailed

#: an error line longer than this keeps its start and its end (a 100,000-character value is shown cut)
MAX_LINE = 1000


def one_line(msg: str) -> str:
    """``msg`` as one printable line: whitespace runs (newlines included) as one space, every other character
    that does not print (an ANSI escape, a right-to-left override) as its escape (``\\x1b``), so a hostile
    name cannot recolour or rewrite the terminal; longer than :data:`MAX_LINE`, its middle is cut."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(str(msg).split()))
    if len(text) > MAX_LINE:
        cut = len(text) - MAX_LINE + 40
        text = f"{text[:MAX_LINE * 2 // 3]} ...({cut} characters cut)... {text[-(MAX_LINE // 3 - 40):]}"
    return text


def _err(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0" or os.environ.get("LOCAL_RANK", "0") == "0":
        typer.echo(f"error: {one_line(msg)}", err=True)


def _flags_without_type(command, ctx) -> None:
    """A flag (``--version``, ``--help``, ``--download``, ``--progress/--no-progress``) takes no value: typer's
    help would show it a type column of ``<bool>``, as if it took one; an empty metavar leaves the column blank."""
    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class Command(TyperCommand):
    """A command whose ``--help`` shows flags without a value type (:func:`_flags_without_type`)."""

    def format_help(self, ctx, formatter):
        _flags_without_type(self, ctx)
        return super().format_help(ctx, formatter)


class OneLineErrors(TyperGroup):
    """click's usage errors (a missing option, ``--epochs abc``, ``--jobs 0``) as one ``error:`` line,
    exit code 2, like every other bad input (click would print a usage box of several lines)."""

    def format_help(self, ctx, formatter):
        _flags_without_type(self, ctx)
        return super().format_help(ctx, formatter)

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
    opts, _, order = cmd.make_parser(sub).parse_args(args=list(args))  # what the command's own parse will see
    refuse_empty(cmd, opts, sub)
    seen = set()
    for param in order:
        if param.param_type_name != "option" or param.multiple or getattr(param, "count", False):
            continue
        if param.name in seen:
            shown = "/".join([*param.opts, *getattr(param, "secondary_opts", [])])
            raise _USAGE_ERRORS[0](f"{shown} is given more than once; give it once", ctx=sub)
        seen.add(param.name)


#: options whose value may be empty text (free text)
MAY_BE_EMPTY = {"title"}


def refuse_empty(cmd, opts: dict, ctx) -> None:
    """An option given an empty value (``--model ""``, ``--out ""``) is a usage error: a path would be read as
    the current folder, a name or a list as not given at all, silently."""
    for param in cmd.params:
        if param.name in MAY_BE_EMPTY or param.name not in opts or getattr(param, "is_flag", False):
            continue
        values = opts[param.name] if isinstance(opts[param.name], (list, tuple)) else [opts[param.name]]
        if any(isinstance(v, str) and not v.strip() for v in values):
            shown = (param.opts or [param.human_readable_name])[0]
            raise _USAGE_ERRORS[0](f"{shown} is empty; give a value or leave the option out", ctx=ctx)


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
    """Every float option must be a finite number (click reads ``nan`` and ``inf`` as floats), every whole
    number one that int64 holds (click reads ``10**30`` as a Python int)."""
    from ..validate import MAX_WHOLE

    bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    for name, value in bound.arguments.items():
        option = f"--{name.rstrip('_').replace('_', '-')}"
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{option} must be a finite number, not {value}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
            raise UserError(f"{option} must be a whole number of at most 19 digits (below 2**63), not "
                            f"{str(value)[:12]}...({len(str(value))} digits)")


#: what a write the machine refuses looks like (the disk, a quota, a read-only file system)
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
_DISK_FULL = ("database or disk is full", "attempt to write a readonly database", "disk i/o error")
AGAIN = ("nothing partial was left; free some space (or make it writable) and run the same command again "
         "(finished models and steps are kept)")


def write_fault(e: BaseException) -> str | None:
    """The one line for an exception that is a write the machine refused, else None: a
    :class:`WriteFailed` (an atomic write, a lock, the model cache), another ``OSError`` with a write's
    errno, or SQLite's full / read-only database (the results store, a tune study)."""
    if isinstance(e, WriteFailed):
        return f"{e}; {AGAIN}"
    if isinstance(e, OSError) and e.errno in WRITE_ERRNOS:
        where = f" writing {e.filename}" if e.filename else ""
        return f"{e.strerror}{where}; {AGAIN}"
    for err in (e, getattr(e, "orig", None)):  # SQLAlchemy wraps sqlite3's error as .orig
        text = str(err).lower() if err is not None else ""
        if type(err).__name__ == "OperationalError" and any(t in text for t in _DISK_FULL):
            return f"the database could not be written ({' '.join(str(err).split())[:120]}); {AGAIN}"
    return None


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
        except Exception as e:  # noqa: BLE001 - a write the machine refused: one line, else re-raised as it was
            line = write_fault(e)
            if line is None:
                raise
            _err(line)
            raise typer.Exit(1) from None
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
