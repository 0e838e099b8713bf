"""Runs the blocks of a page (:mod:`docblocks`) in one fresh folder, in order: ``unlearnkit`` commands
in-process with typer's CliRunner (no subprocess: importing torch costs seconds each), Python blocks with
``exec`` in a fresh namespace. A failing block raises :class:`DocsBlockFailed` naming the page and line."""
from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from pathlib import Path

import typer.main
import yaml
from docblocks import Block, blocks
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
#: set on every command that has the option (then a block's own ``tiny`` options): CPU, no progress bars,
#: one worker (no process started: each would import torch again), one retrained reference
DEFAULT_OPTIONS = ["--device=cpu", "--no-progress", "--jobs=1", "--references=1"]
#: what every page's folder holds besides: links to the repository's folders the pages name
LINKED = ("benchmarks", "examples")
#: my_run.yaml in every page's folder: the run config usage.md's ``run --config my_run.yaml`` reads
MY_RUN = {"dataset": "digits", "forget_classes": [3], "methods": ["finetune"], "out": "runs/config"}
#: tiny.yaml in every page's folder: a suite of one cell (pages' bench lines point at it with ``tiny OLD=>NEW``)
TINY_SUITE = {"suite": "tiny",
              "defaults": {"recipe": {"epochs": 2},
                           "audit_config": {"n_splits": 2, "bn_recalibration": False, "head_refit": False,
                                            "relearn": False}},
              "grids": [{"name": "class", "datasets": ["digits"], "tasks": [{"forget_classes": [3]}],
                         "methods": ["GA"], "seeds": [0]}]}


class DocsBlockFailed(AssertionError):
    """A block of a page did not run."""


def prepare(workspace: Path) -> None:
    """The folder a page runs in: links to :data:`LINKED`, ``tiny.yaml`` and ``my_run.yaml``."""
    for name in LINKED:
        (workspace / name).symlink_to(ROOT / name, target_is_directory=True)
    (workspace / "tiny.yaml").write_text(yaml.safe_dump(TINY_SUITE))
    (workspace / "my_run.yaml").write_text(yaml.safe_dump(MY_RUN))


def _param(command, opt: str):
    return next((p for p in command.params
                 if opt in getattr(p, "opts", ()) or opt in getattr(p, "secondary_opts", ())), None)


def with_options(args: list[str], options: list[str]) -> list[str]:
    """``args`` with each ``--option=VALUE`` / ``--flag`` of ``options`` set, on commands that have it (the
    page's own value of that option removed first)."""
    group = typer.main.get_command(_app())
    command = group.commands.get(args[0]) if args and hasattr(group, "commands") else None
    if command is None:
        return args
    out = list(args)
    for item in options:
        opt = item.split("=", 1)[0]
        param = _param(command, opt)
        if param is None:
            continue
        names = set(param.opts) | set(getattr(param, "secondary_opts", ()))
        flag = getattr(param, "is_flag", False)
        kept, skip_next = [], False
        for tok in out:
            if skip_next:
                skip_next = False
                continue
            if tok in names:
                skip_next = not flag
                continue
            if any(tok.startswith(n + "=") for n in names):
                continue
            kept.append(tok)
        out = kept + [item]
    return out


def _app():
    from unlearnkit.cli import app

    return app


def run_shell(block: Block) -> None:
    runner = CliRunner()
    for words in block.commands():
        if words[:2] == ["cat", ">"] and len(words) == 4:  # a here-document (docblocks.py): the file it writes
            Path(words[2]).parent.mkdir(parents=True, exist_ok=True)
            Path(words[2]).write_text(words[3])
            continue
        if words[:1] == ["unlearnkit"]:
            args = words[1:]
        elif words[:3] == ["python", "-m", "unlearnkit"]:
            args = words[3:]
        else:
            raise DocsBlockFailed(f"{block.where}: `{' '.join(words)}` is not an unlearnkit command: mark the block "
                                  f"`<!-- docs-test: skip (reason) -->`")
        args = with_options(args, DEFAULT_OPTIONS + block.options)
        r = runner.invoke(_app(), args)
        if r.exit_code != 0:
            tb = "".join(traceback.format_exception(r.exception)) if r.exception and r.exit_code != 2 else ""
            raise DocsBlockFailed(f"{block.where}: `unlearnkit {' '.join(args)}` exited {r.exit_code}:\n"
                                  f"{r.output[-3000:]}{tb[-3000:]}")


def _unlearnkit_args(words: list[str]) -> list[str] | None:
    """The unlearnkit arguments of a command: ``unlearnkit ARGS``, ``python -m unlearnkit ARGS`` or ``torchrun
    [its options] -m unlearnkit ARGS``; None for another command."""
    if words[:1] == ["unlearnkit"]:
        return words[1:]
    if words[:3] == ["python", "-m", "unlearnkit"]:
        return words[3:]
    if words[:1] == ["torchrun"] and "-m" in words and words[words.index("-m") + 1:][:1] == ["unlearnkit"]:
        return words[words.index("-m") + 2:]
    return None


def _make_targets() -> set[str]:
    import re

    text = (ROOT / "Makefile").read_text()
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M)}


def _extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def check_command(where: str, words: list[str]) -> None:
    """One command of a ``check`` block checked against the code without running it (docblocks.py)."""
    while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value prefixes
        words = words[1:]
    args = _unlearnkit_args(words)
    if args is not None:
        return check_cli(where, args)
    tool = Path(words[0]).name if words else ""
    if tool == "make":
        unknown = [t for t in words[1:] if "=" not in t and not t.startswith("-") and t not in _make_targets()]
        if unknown:
            raise DocsBlockFailed(f"{where}: `make {' '.join(unknown)}`: no such target in the Makefile")
        return
    if tool == "pip" and words[1:2] == ["install"]:
        import re

        for spec in words[2:]:
            for extras in re.findall(r"\[([^\]]+)\]", spec):
                missing = set(e.strip() for e in extras.split(",")) - _extras()
                if missing:
                    raise DocsBlockFailed(f"{where}: `pip install {spec}`: pyproject.toml has no extra {missing}")
        return
    if tool == "python" and len(words) > 1 and words[1].endswith(".py"):
        if not (ROOT / words[1]).is_file():
            raise DocsBlockFailed(f"{where}: `python {words[1]}`: no such script")
        return
    if tool == "pytest" or words[:3] == ["python", "-m", "pytest"]:
        paths = [w.split("::")[0] for w in words[1:] if not w.startswith("-") and "/" in w]
        missing = [p for p in paths if not (ROOT / p).exists()]
        if missing:
            raise DocsBlockFailed(f"{where}: `pytest`: {missing} do not exist")
        return
    raise DocsBlockFailed(f"{where}: `{' '.join(words)}` cannot be checked: run it, or skip the block with the reason")


def check_cli(where: str, args: list[str]) -> None:
    """``unlearnkit ARGS`` parsed as the CLI parses it (the command, its options and their types), not run."""
    from unlearnkit.cli.app import _CLICK  # typer's own copy of click, and click

    exits = tuple(e for m in _CLICK for e in (getattr(m.exceptions, "Exit", None),) if e is not None) + (typer.Exit,)
    errors = tuple(m.exceptions.ClickException for m in _CLICK)
    group = typer.main.get_command(_app())
    try:
        with group.make_context("unlearnkit", list(args)) as ctx:
            protected = getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])
            name, cmd, rest = group.resolve_command(ctx, [*protected, *ctx.args])
            cmd.make_context(name, rest, parent=ctx).close()
    except exits:  # --help / --version
        return
    except errors as e:
        raise DocsBlockFailed(f"{where}: `unlearnkit {' '.join(args)}` does not parse: {e.format_message()}") from None


def check_block(block: Block) -> None:
    """A ``check`` block: each command checked against the code (:func:`check_command`), a Python block compiled."""
    if block.lang == "python":
        import textwrap

        compile(textwrap.dedent(block.source()), block.where, "exec")
        return
    for words in block.commands():
        if words[:2] == ["cat", ">"] and len(words) == 4:
            continue  # a here-document: nothing to check
        check_command(block.where, words)


def run_python(block: Block, namespace: dict) -> None:
    try:
        exec(compile(block.source(), block.where, "exec"), namespace)
    except Exception as e:
        raise DocsBlockFailed(f"{block.where}: the Python block raised {type(e).__name__}: {e}\n"
                              f"{traceback.format_exc()[-3000:]}") from e


def run_page(text: str, page: str, workspace: Path, namespaces: dict[str, Callable[[], dict]]) -> list[str]:
    """Run every block of ``text`` in ``workspace`` (prepared, made the working folder meanwhile); returns
    ``page:line`` of the blocks run and skipped (``skip: reason``). Raises :class:`DocsBlockFailed`."""
    done = []
    prepare(workspace)
    before = Path.cwd()
    os.chdir(workspace)
    try:
        for block in blocks(text, page):
            if block.skip:
                done.append(f"{block.where} skip: {block.skip}")
                continue
            if block.check:
                check_block(block)
                done.append(f"{block.where} checked: {block.check}")
                continue
            if block.lang == "python":
                if block.namespace is not None and block.namespace not in namespaces:
                    raise DocsBlockFailed(f"{block.where}: no namespace {block.namespace!r} "
                                          f"(known: {', '.join(namespaces)})")
                ns = dict(namespaces[block.namespace]()) if block.namespace else {}
                ns["__name__"] = "__docs__"
                run_python(block, ns)
            else:
                run_shell(block)
            done.append(block.where)
    finally:
        os.chdir(before)
    return done
