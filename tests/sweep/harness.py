"""The bad-input sweep harness (issue 44): every command and public function against each family of bad input.

A *family* is a way a careless or hostile user gets a value wrong; each family is a function from a target's
parameter (or file) to concrete bad values, so a new option or a new file-taking command is swept the day it is
added. The families (:data:`FAMILIES`):

* ``wrong type``: text for a number, a folder for a file, a list for a mapping, an int for a model;
* ``empty``: an empty value, file, list or dataset;
* ``huge``: a number beyond int64, 100,000 characters of text, a file larger than its kind can be (sparse);
* ``NaN/inf``: non-finite numbers in options, in YAML and JSON files, in weights and data;
* ``special file``: a character device (``/dev/zero``, read only), a FIFO or a socket where a file is read or
  written (outputs are never pointed at a real device: on a root machine a regression would replace it);
* ``non-UTF-8``: a text file (YAML, JSON, indices) that is not UTF-8;
* ``duplicate``: an option or a key given twice, the same layer or row twice;
* ``contradictory``: two forget sets at once, a file whose parts disagree, a method object with keywords;
* ``hostile name``: names with terminal escapes, newlines, rich markup, mathtext, ``../`` path climbs, and files
  whose contents look like a system password file (which must never be quoted back).

The contract each case is held to (:func:`assert_cli_refused`, :func:`assert_api_refused`): the command exits
with code 2 and prints exactly one ``error:`` line on stderr (printable: no escape reaches the terminal; at most
about a thousand characters), no traceback, nothing created under its output path, and no work started (a
guard stops every command where training, auditing or reporting begins); a public function raises one
``unlearnkit.UserError`` (a ``ValueError``) whose message is one line naming the argument. A case may instead
be *accepted* by design (``ACCEPTED``): then it must reach the work, and the reason is written beside it.
"""
from __future__ import annotations

import importlib
import inspect
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

FAMILIES = ("wrong type", "empty", "huge", "NaN/inf", "special file", "non-UTF-8", "duplicate", "contradictory",
            "hostile name")

#: the first line of a system password file: a file that holds it must never be quoted back
SECRET = "root:x:0:0:SECRET-44:/root:/bin/bash"
#: names a hostile user types: a terminal escape, a newline, rich markup with mathtext, a path that climbs out
HOSTILE = ["\x1b[31mred\x1b[0m", "a\nb", "[red]x$y$", "../../../etc/passwd", "x\u202eevil"]
HUGE_TEXT = "x" * 100_000
#: a number beyond int64 (numpy and torch cannot hold it)
HUGE_INT = "1" + "0" * 30
#: the size of a (sparse) file larger than any text input may be (validate.MAX_TEXT_BYTES is 64 MiB)
HUGE_FILE = 80 * 2**20


class WorkStarted(Exception):
    """Raised by the guard where a command or function would start training, auditing or reporting."""


GUARDED = ("unlearnkit.training.reference_model", "unlearnkit.runner.reference_model",
           "unlearnkit.audit.user._audit", "unlearnkit.audit.user.model_outputs", "unlearnkit.runner.audit_model",
           "unlearnkit.bench.runner.run_bench", "unlearnkit.report.build.make_report",
           "unlearnkit.forgetting_quality_experiment._reference", "unlearnkit.methods.base.UnlearningMethod.unlearn",
           "unlearnkit.stream._Stream.run", "unlearnkit.runner.reference_models", "unlearnkit.api._fit_references",
           "unlearnkit.api._users_fit")


def install_guard(monkeypatch) -> None:
    """Every target stops with :class:`WorkStarted` where its work begins (modules imported first: one imported
    while patched would keep the stop as its own name for good)."""

    def stop(*args, **kwargs):
        raise WorkStarted

    owners = []
    for target in GUARDED:  # every module imported before anything is patched (``from x import f`` copies f)
        module, _, attr = target.rpartition(".")
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError:  # a class path: import its module, then walk to the class
            mod, _, cls = module.rpartition(".")
            obj = getattr(importlib.import_module(mod), cls)
        owners.append((obj, attr))
    for obj, attr in owners:
        monkeypatch.setattr(obj, attr, stop)


# --- files -------------------------------------------------------------------------------------------------


@dataclass
class Files:
    """Valid inputs (a checkpoint, a suite, a run config, a request list, a results.json, a forgetting-quality
    file, a preset file) and bad ones (a FIFO, an empty file, a non-UTF-8 file, a huge sparse file, a file holding
    :data:`SECRET`), under one folder made once per session."""

    root: Path
    good: dict[str, Path] = field(default_factory=dict)
    bad: dict[str, Path] = field(default_factory=dict)


def make_files(root: Path, model) -> Files:
    import json

    import yaml
    from sample_results import sample_results

    from unlearnkit.checkpoints import save_checkpoint
    from unlearnkit.results import FORGETTING_QUALITY_SCHEMA

    f = Files(root)
    good = f.good
    good["ckpt"] = root / "model.pt"
    save_checkpoint(model, good["ckpt"], {"kind": "original"})
    grid = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"], "seeds": [0]}
    good["suite"] = _write(root / "suite.yaml", yaml.safe_dump({"suite": "t", "grids": [grid]}))
    good["config"] = _write(root / "run.yaml", yaml.safe_dump({"dataset": "digits", "forget_classes": [3],
                                                                 "methods": ["finetune"]}))
    good["requests"] = _write(root / "requests.yaml", "- classes: [3]\n")
    good["results"] = _write(root / "results.json", json.dumps(sample_results()))
    good["fq"] = _write(root / "forgetting_quality.json", json.dumps(fq_doc(FORGETTING_QUALITY_SCHEMA)))
    good["preset"] = _write(root / "preset.yaml", "unlearnkit_preset: 1\nbase: reference\n"
                                                  "method_params: {finetune: {lr: 0.01}}\n")
    good["indices"] = _write(root / "idx.txt", "1 2 3\n")
    bad = f.bad
    bad["fifo"] = root / "pipe"
    os.mkfifo(bad["fifo"])
    bad["socket"] = root / "sock"
    _socket(bad["socket"])
    bad["empty"] = _write(root / "empty.yaml", "")
    bad["non-utf8"] = root / "latin1.yaml"
    bad["non-utf8"].write_bytes(b"dataset: digits\nmethods: [finetune]  # caf\xe9\n")
    bad["huge"] = root / "huge.yaml"
    with open(bad["huge"], "wb") as fh:  # sparse: no disk used
        fh.truncate(HUGE_FILE)
    bad["secret"] = _write(root / "passwd", SECRET + "\n")
    bad["folder"] = root / "a-folder"
    bad["folder"].mkdir()
    return f


def _socket(path: Path) -> None:
    """A Unix socket file at ``path`` (left bound: the file is what matters)."""
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def fq_doc(schema: str) -> dict:
    return {"schema": schema, "config": {"seed": 0},
            "task": {"dataset": "digits", "model": "small_cnn",
                     "forget": {"kind": "classes", "classes": [3], "random": None, "indices_file": None}},
            "methods": {"finetune": {"control": False, "forget_score": 0.5, "final_score": 0.5}}}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- the contract ------------------------------------------------------------------------------------------


def assert_cli_refused(result, out: Path, names: tuple[str, ...], secret: str = SECRET) -> str:
    """Exit code 2, exactly one printable ``error:`` line on stderr (at most ~1,000 characters) naming one of
    ``names``, no traceback, ``out`` not created, no work started, the secret not quoted. Returns the line."""
    assert not isinstance(result.exception, WorkStarted), "accepted: the work began (no refusal)"
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:], repr(result.exception))
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    line = lines[0]
    assert line.isprintable(), repr(line)
    assert len(line) <= 1100, len(line)
    assert "Traceback" not in result.output
    assert secret not in result.output, "the contents of a refused file were quoted"
    assert not out.exists(), f"{out} was created"
    assert any(n.lower() in line.lower() for n in names), (names, line)
    return line


def assert_cli_accepted(result) -> None:
    """The value is accepted by design: the command reaches its work."""
    assert isinstance(result.exception, WorkStarted), (result.exit_code, result.output[-2000:])


def assert_api_refused(call: Callable[[], Any], names: tuple[str, ...]) -> str:
    """One ``UserError`` (a ``ValueError``), before any work, its message one line naming one of ``names``."""
    from unlearnkit import UserError

    try:
        call()
    except WorkStarted:
        raise AssertionError("accepted: the work began (no refusal)") from None
    except UserError as e:
        assert isinstance(e, ValueError)
        message = str(e)
        assert "\n" not in message and message.strip(), repr(message)
        assert SECRET not in message
        assert any(n.lower() in message.lower() for n in names), (names, message)
        return message
    raise AssertionError("accepted: no error was raised")


# --- the CLI's options, read from the CLI itself -----------------------------------------------------------


def commands() -> dict:
    import typer.main

    from unlearnkit.cli import app

    return typer.main.get_command(app).commands


def option_kind(cmd, param) -> type | None:
    """The Python type of a command's parameter (Optional[X] and List[X] give X); None for a flag."""
    if getattr(param, "is_flag", False):
        return None
    fn = inspect.unwrap(cmd.callback)
    hints = typing.get_type_hints(fn, localns={"Path": Path})
    hint = hints.get(param.name, str)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    hint = args[0] if args else hint
    args = typing.get_args(hint)
    return args[0] if args else hint
