"""Checks of the values a user types, applied once where they enter (CLI options, YAML, results files).

Every check raises :class:`~unlearnkit.errors.UserError` with one line that names the option or key,
shows the bad value and says what is allowed; the CLI prints it as ``error: ...`` and exits with code 2.
Nothing here does work or writes a file: the location checks probe writability with an anonymous
temporary file (``O_TMPFILE``, never visible in the folder), so a run that cannot save its results
fails before it trains, and leaves nothing behind.
"""
from __future__ import annotations

import math
import numbers
import os
import stat
import tempfile
import typing
from pathlib import Path
from typing import Any

from .errors import UserError

#: seeds: numpy's RandomState takes 0..2**32-1
MAX_SEED = 2**32 - 1
#: a typer option's range for a seed: ``typer.Option(0, **SEED_RANGE)``
SEED_RANGE = {"min": 0, "max": MAX_SEED}


#: the largest learning rate (or step size) a float32 weight update can take without overflowing
MAX_LR = 3.4028234663852886e38
#: the largest whole number anything here holds (int64: numpy's and torch's integers)
MAX_WHOLE = 2**63 - 1
#: the largest text file read whole (a run config, a suite, a request list, a results.json, an indices
#: file): the largest of these in practice is a few MB; a bigger one is not what the option takes
MAX_TEXT_BYTES = 64 * 2**20


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def is_number(value: Any) -> bool:
    """A real number (int or float, numpy scalars too), never a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number in [low, high] (an open end with ``low_open``/``high_open``)."""
    if not is_number(value):
        raise UserError(f"{name} must be a number, not {_show(value)}")
    v = float(value)
    if not math.isfinite(v):
        raise UserError(f"{name} must be a finite number, not {value}")
    lo_bad = low is not None and (v <= low if low_open else v < low)
    hi_bad = high is not None and (v >= high if high_open else v > high)
    if lo_bad or hi_bad:
        lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
        hi = "" if high is None else f"{'<' if high_open else '<='} {high:g}"
        raise UserError(f"{name} must be {' and '.join(p for p in (lo, hi) if p)}, not {value}")
    return v


def whole(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (not a bool, not 1.5) in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UserError(f"{name} must be a whole number, not {_show(value)}")
    v = int(value)
    if abs(v) > MAX_WHOLE:  # beyond int64: numpy and torch cannot hold it
        shown = str(v) if len(str(v)) <= 24 else f"{str(v)[:12]}...({len(str(v))} digits)"
        raise UserError(f"{name} must be a whole number of at most 19 digits (below 2**63), not {shown}")
    if (low is not None and v < low) or (high is not None and v > high):
        rng = f">= {low}" if high is None else f"<= {high}" if low is None else f"in {low}..{high}"
        raise UserError(f"{name} must be a whole number {rng}, not {v}")
    return v


def forget_random(name: str, value: Any) -> float | int:
    """A random forget set: a fraction in (0, 1) or a whole count >= 1 (1.5 is neither)."""
    if not is_number(value):
        raise UserError(f"{name} must be a fraction in (0, 1) or a whole count >= 1, not {_show(value)}")
    v = float(value)
    if math.isfinite(v) and 0 < v < 1:
        return v
    if math.isfinite(v) and v >= 1 and v == int(v):
        return int(v)
    raise UserError(f"{name} must be a fraction in (0, 1) or a whole count >= 1, not {value}")


def forget_flipped(name: str, value: Any) -> float:
    """The fraction of training samples given flipped labels (mislabeled data): a number in (0, 0.5)."""
    return number(name, value, low=0, high=0.5, low_open=True, high_open=True)


def int_list(name: str, value: Any, *, low: int | None = 0, unique: bool = True) -> list[int]:
    """Integers from ``"3,8"``, ``3`` or ``[3, 8]``; duplicates dropped (first kept) when ``unique``."""
    if isinstance(value, str):
        parts = [t for t in value.replace(" ", "").split(",") if t != ""]
        try:
            items: list = [int(t) for t in parts]
        except ValueError:
            raise UserError(f"{name} must be comma-separated whole numbers (e.g. 3 or 3,8), not {value!r}") from None
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    out: list[int] = []
    for item in items:
        v = whole(name, item, low=low)
        if not (unique and v in out):
            out.append(v)
    return out


def choice(name: str, value: Any, allowed: typing.Iterable[str]) -> str:
    allowed = tuple(allowed)
    if not isinstance(value, str) or value not in allowed:
        raise UserError(f"{name} must be one of {', '.join(allowed)}, not {_show(value)}")
    return value


def learning_rate(name: str, value: Any) -> float:
    """A learning rate: a finite number > 0 that a float32 update can take (at most :data:`MAX_LR`)."""
    return number(name, value, low=0, low_open=True, high=MAX_LR)


def device(name: str, value: Any):
    """A ``torch.device`` this build can compute on: ``auto`` (a GPU when there is one, else the CPU),
    ``cpu``, ``cuda``/``cuda:N`` with N below the GPU count, ``mps`` where Apple's backend is available.
    ``meta`` (no data), other backends and text torch does not read are refused."""
    import torch

    if value is None or (isinstance(value, str) and value.strip() == "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(value, (str, torch.device)):
        raise UserError(f"{name} must be auto, cpu, cuda or cuda:N, not {_show(value)}")
    try:
        dev = torch.device(value.strip() if isinstance(value, str) else value)
    except (RuntimeError, ValueError):
        raise UserError(f"{name} must be auto, cpu, cuda or cuda:N, not {_show(value)} (unknown device)") from None
    if dev.type == "cpu":
        return dev
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"{name} {dev} asked for, but no CUDA GPU is available here (use cpu or auto)")
        if dev.index is not None and dev.index >= count:
            raise UserError(f"{name} {dev}: there is no such GPU here ({count} GPU(s): cuda:0..cuda:{count - 1})")
        return dev
    if dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise UserError(f"{name} mps asked for, but Apple's MPS backend is not available here (use cpu or auto)")
        return dev
    raise UserError(f"{name} {dev.type} is not a device this toolkit computes on (use auto, cpu, cuda or cuda:N)")


def layer_names(name: str, value: Any) -> list[str] | None:
    """Layers to audit as the Python API takes them: None (the model's own audit layers), or a non-empty
    list (or tuple) of distinct, non-empty names (module paths or ``penultimate``). A bare string is
    refused, not read letter by letter (``layers="penultimate"`` would name the layers ``p``, ``e``, ...)."""
    if value is None:
        return None
    if isinstance(value, str):
        raise UserError(f"{name} must be a list of layer names, e.g. {name}=[{value!r}], not the text {value!r}")
    if not isinstance(value, (list, tuple)):
        raise UserError(f"{name} must be a list of layer names (module paths or 'penultimate'), not {_show(value)}")
    if not value:
        raise UserError(f"{name} is empty: name at least one layer (e.g. ['penultimate']), or give None for the "
                        f"model's audit layers")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise UserError(f"{name}[{i}] must be a layer name (a module path or 'penultimate'), not {_show(item)}")
        if item in out:
            raise UserError(f"{name} names {item!r} twice; give each layer once")
        out.append(item)
    return out


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise UserError(f"{name} must be text, not {_show(value)}")
    return value


def file_name(name: str, value: Any) -> str:
    """A name that becomes one file or folder name (a suite's ``results/<suite>``): text of 1 to 100
    characters, no ``/`` or ``\\``, not ``.`` or ``..`` and no control characters, so the path built from it
    stays inside the folder it belongs to (``../../escape`` would write outside it)."""
    if not isinstance(value, str):
        raise UserError(f"{name} must be a name (text), not {_show(value)}")
    text_ = value
    bad = next((c for c in text_ if c in "/\\" or ord(c) < 32 or ord(c) == 127), None)
    if not text_.strip() or text_.strip(".") == "" or bad is not None or len(text_) > 100:
        why = ("a folder separator or a control character" if bad is not None else
               "over 100 characters" if len(text_) > 100 else "no name")
        raise UserError(f"{name} {text_!r} is {why}: it names one folder (results/<name>), so give a plain name "
                        f"such as cpu or my-suite")
    return text_


def mapping(name: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{name} must be a mapping (key: value), not {_show(value)}")
    return value


# ---------------------------------------------------------------------------------------------
# values against a type annotation (RunConfig fields, a method's hyperparameters)


def of_type(name: str, value: Any, hint: Any) -> Any:
    """``value`` checked against a type hint (int, float, str, bool, X | None, list[X], dict, tuple).

    Floats must be finite; an int is accepted for a float. A string that spells a number is
    accepted for a number (YAML 1.1 reads ``1e-3`` as a string). Returns the value, converted."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        errors = []
        for a in rest:
            try:
                return of_type(name, value, a)
            except UserError as e:
                errors.append(str(e))
        raise UserError(errors[0] if len(rest) == 1 else
                        f"{name} must be {' or '.join(_type_name(a) for a in rest)}, not {_show(value)}")
    if hint is bool:
        if not isinstance(value, bool):
            raise UserError(f"{name} must be true or false, not {_show(value)}")
        return value
    if hint is int:
        if isinstance(value, str):
            value = _parse_number(value, int)
        return whole(name, value)
    if hint is float:
        if isinstance(value, str):
            value = _parse_number(value, float)
        return number(name, value)
    if hint is str:
        return text(name, value)
    if hint is dict or origin is dict:
        return mapping(name, value)
    if hint in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise UserError(f"{name} must be a list, not {_show(value)}")
        item = args[0] if args else None  # list[X] and tuple[X, ...]
        if item is None:
            return list(value) if hint is list or origin is list else tuple(value)
        out = [of_type(f"{name}[{i}]", v, item) for i, v in enumerate(value)]
        return out if (hint is list or origin is list) else tuple(out)
    return value  # a type this checker does not know: left to the consumer


def _parse_number(text: str, kind: type) -> Any:
    try:
        return kind(text.strip()) if kind is int else float(text.strip())
    except ValueError:
        return text  # reported by the caller with the original text


def _type_name(hint: Any) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", dict: "a mapping",
             list: "a list", tuple: "a list"}
    return names.get(hint) or names.get(typing.get_origin(hint)) or str(hint)


# ---------------------------------------------------------------------------------------------
# locations


def _probe(folder: Path) -> bool:
    """Can files be created in ``folder``? An anonymous temporary file, gone when closed."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def _named(name: str, path: Path) -> str:
    """``out: runs/x`` for a configuration key, ``--out runs/x`` for an option or a phrase."""
    return f"{name}: {path}" if name.replace(".", "_").isidentifier() else f"{name} {path}"


def _writable(name: str, path: Path, folder: Path) -> None:
    """``folder`` (where ``path`` goes) exists and is writable, or its nearest existing ancestor is."""
    anc = folder
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if not anc.is_dir():
        raise UserError(f"{_named(name, path)} cannot be written: {anc} is a file, not a folder")
    if not _probe(anc):
        raise UserError(f"{_named(name, path)} cannot be written: {anc} is not writable")


def output_dir(name: str, path: str | Path) -> Path:
    """A folder that exists and is writable, or can be created: checked without creating anything."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(f"{_named(name, p)} is a file, not a folder")
    _writable(name, p, p)
    return p


def output_file(name: str, path: str | Path) -> Path:
    """A file that can be written: not a folder, in a folder that is (or can be made) writable."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"{_named(name, p)} is a folder; give a file name")
    not_special(name, p, output=True)
    if p.exists() and not p.is_file():
        raise UserError(f"{_named(name, p)} is not a regular file")
    _writable(name, p, p.parent)
    return p


#: file types that are not regular files, each with a reader that would block or never end on it
_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str | Path) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder (``"a FIFO (named pipe)"``,
    ``"a character device"``, ``"a block device"``, ``"a socket"``, or ``"not a regular file"``), read from
    its type (``stat``, following symlinks) without opening it; None for a regular file, a folder or
    nothing there. Reading a FIFO waits for a writer forever, ``/dev/zero`` never ends: such paths are
    refused by type, before any read."""
    try:
        mode = os.stat(Path(path).expanduser()).st_mode
    except (OSError, ValueError):  # missing, a broken symlink, a NUL in the name: the caller's own check says it
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((kind for test, kind in _SPECIAL if test(mode)), "not a regular file")


def not_special(name: str, path: str | Path, *, output: bool = False) -> Path:
    """``path`` unless it is a device, a FIFO or a socket (:func:`special_kind`): then one UserError line
    naming ``name``, saying what it is; nothing is read from it (or, an ``output``, written to it). Returns
    the path."""
    p = Path(path).expanduser()
    kind = special_kind(p)
    if kind is not None:
        done = "nothing was written to it" if output else "it was not read"
        raise UserError(f"{_named(name, p)} is {kind}, not a regular file; {done}")
    return p


def input_file(name: str, path: str | Path) -> Path:
    """A regular file that exists and can be read: not a folder, and refused by type when it is a device, a
    FIFO or a socket (:func:`not_special`), before it is opened (a FIFO blocks an ``open``, ``/dev/zero``
    never ends). Its contents are not read here (and never quoted)."""
    p = Path(path).expanduser()
    try:
        os.stat(p)
    except FileNotFoundError:
        raise UserError(f"{_named(name, p)} does not exist") from None
    except (OSError, ValueError) as e:
        raise UserError(f"{_named(name, p)} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if p.is_dir():
        raise UserError(f"{_named(name, p)} is a folder, not a file")
    not_special(name, p)
    try:  # non-blocking: the file may have been swapped for a FIFO since the check
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)))
    except OSError as e:
        raise UserError(f"{_named(name, p)} cannot be read ({e.strerror})") from None
    return p


# ---------------------------------------------------------------------------------------------
# YAML inputs (a run config, a bench suite, a preset file): one loader for every reader


def _yaml_loader():
    """A ``yaml.SafeLoader`` (plain data only: no code runs) that refuses a key given twice in one
    mapping, where PyYAML would keep the last value silently (a merge ``<<:`` may still be overridden)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: set = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        repeated = key in seen
                    except TypeError:  # an unhashable key: PyYAML's own error names it
                        break
                    if repeated:
                        line = key_node.start_mark.line + 1
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key!r} appears twice in one mapping (line {line}); give it once",
                            key_node.start_mark)
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def yaml_text(name: str, text: str) -> Any:
    """``text`` parsed as YAML (plain data, no key twice in a mapping); a problem is one UserError line
    that starts with ``name``."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise UserError(f"{name} nests its lists or mappings too deeply to be read") from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None)
        if isinstance(e, yaml.constructor.ConstructorError) and problem and "appears twice" in problem:
            raise UserError(f"{name}: {problem}") from None
        raise UserError(f"{name} is not valid YAML: {_yaml_problem(e)}") from None


def _yaml_problem(e) -> str:
    """A YAML error in one short line: what is wrong and where (line, column)."""
    what = "; ".join(p for p in (getattr(e, "context", None), getattr(e, "problem", None)) if p)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join((what or str(e)).split()) + where


def text_file(name: str, path: str | Path, max_bytes: int = MAX_TEXT_BYTES) -> tuple[Path, str]:
    """``(path, text)`` of a UTF-8 text file read whole (:func:`input_file` first: a device or a FIFO is
    refused unread); one larger than ``max_bytes``, or not UTF-8, is one UserError naming ``name`` and the
    file, which never quotes its contents (only the offending byte's value and offset)."""
    p = input_file(name, path)
    size = p.stat().st_size
    if size > max_bytes:
        raise UserError(f"{_named(name, p)} is {size / 2**20:.0f} MiB, more than the {max_bytes / 2**20:.0f} MiB "
                        f"such a file can be (is it the right file?)")
    try:
        return p, p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{_named(name, p)} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                        f"{e.start})") from None
    except OSError as e:
        raise UserError(f"{_named(name, p)} cannot be read ({e.strerror})") from None


def json_text(name: str, text: str, what: str = "JSON") -> Any:
    """``text`` parsed as JSON: a key twice in one object (Python's reader would keep the last silently) is one
    UserError starting with ``name``, as is text that is not JSON (where, not what: the contents are not
    quoted). ``NaN`` and ``Infinity`` (Python's own json writes them) are read as floats: the reader's range
    checks say what they may be (a results.json reads a NaN metric as missing, an infinite one is refused)."""
    import json

    def pairs(items):
        seen = set()
        for key, _ in items:
            if key in seen:
                raise UserError(f"{name}: key {key!r} appears twice in one object; give it once")
            seen.add(key)
        return dict(items)

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise UserError(f"{name} is not {what} ({e.msg}: line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise UserError(f"{name} nests its objects too deeply to be read") from None


def yaml_file(name: str, path: str | Path) -> tuple[Path, Any]:
    """``(path, data)``: a YAML file that exists, is UTF-8 text (:func:`text_file`: at most
    :data:`MAX_TEXT_BYTES`) and parses (:func:`yaml_text`); every problem is one UserError line naming
    ``name`` and the file."""
    p, text = text_file(name, path)
    return p, yaml_text(_named(name, p), text)


def dataclass_fields(obj: Any, where: str = "") -> None:
    """Check every field of a dataclass instance against its annotation (:func:`of_type`), in place.

    ``where`` prefixes the field's name in the message (e.g. ``"salun: "``)."""
    import dataclasses

    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        if f.name in hints:
            value = of_type(f"{where}{f.name}", getattr(obj, f.name), hints[f.name])
            object.__setattr__(obj, f.name, value)


# ---------------------------------------------------------------------------------------------
# shared small helpers (one copy each)


def suggestion(word: str, choices: typing.Iterable[str], cutoff: float = 0.6) -> str:
    """``"; did you mean 'epochs'?"`` for the closest of ``choices``, or ``""``."""
    import difflib

    close = difflib.get_close_matches(str(word), sorted(choices), n=1, cutoff=cutoff)
    return f"; did you mean {close[0]!r}?" if close else ""


def finite_or_none(x: Any) -> Any:
    """NaN and infinities as None (strict JSON has no NaN), recursively through dicts and lists."""
    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite_or_none(v) for v in x]
    if isinstance(x, numbers.Real) and not isinstance(x, (bool, numbers.Integral)):
        return float(x) if math.isfinite(float(x)) else None
    return x
