"""Checkpoints: only tensors and plain types, atomic writes, sha256, provenance.

A checkpoint is a dict ``{"format", "model": {name, kwargs}, "state_dict", "sha256", "meta"}``
written with ``torch.save`` to a temporary file in the same folder and moved into place with
``os.replace`` (a crash never leaves a half-written checkpoint). ``sha256`` is over the state
dict's tensors (names, dtypes, shapes, bytes), so corruption that still unpickles is caught.
Loading always uses ``torch.load(weights_only=True)``: no code in a checkpoint is ever executed.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

from . import validate
from .errors import CheckpointError, UserError, WriteFailed

FORMAT = "unlearnkit.checkpoint/1"


def state_sha256(state_dict: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(state_dict):
        t = state_dict[k].detach().cpu().contiguous()
        h.update(k.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    validate.not_special("file", path)  # a device or a FIFO would never end
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, write) -> None:
    """Call ``write(fileobj)`` on a temp file beside ``path``, fsync, then rename into place.

    The file gets the mode a plain ``open`` would give (0666 less the umask): a shared results
    folder stays readable by the team (``mkstemp`` alone would leave it 0600). The temp file is
    locked while it is written; once ``path`` is in place, the temp files a killed earlier write of
    it left behind are removed (:func:`remove_stale_temps`), so a rerun leaves no ``.*.tmp``.

    A write the file system refuses (a full disk, a quota, a read-only file system) raises
    :class:`~unlearnkit.errors.WriteFailed` naming ``path``, also where ``torch.save`` wraps the
    ``OSError`` in a ``RuntimeError``; the temp file is removed and ``path`` keeps what it held. A ``path``
    that is a folder, a device, a FIFO or a socket is a :class:`UserError` before anything is written (the
    rename would replace ``/dev/null`` itself)."""
    path = _target(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        fcntl.flock(fd, fcntl.LOCK_EX)  # a live writer's temp file: never taken for a stale one
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            sink = _Recording(f)
            try:
                write(sink)
            except OSError:
                raise
            except Exception:
                if sink.error is not None:  # torch.save turns the OSError of a write into a RuntimeError
                    raise sink.error from None
                raise
            f.flush()
            os.fsync(f.fileno())
            _target(path)  # still a file (or nothing) the moment it is replaced
            os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(e, OSError) and not isinstance(e, WriteFailed) and e.errno is not None:
            raise WriteFailed(e.errno, e.strerror, str(path)) from None
        raise
    remove_stale_temps(path)


def _target(path) -> Path:
    """``path`` as a file to write: a path (text or ``os.PathLike``) that is not a folder, a device, a FIFO or a
    socket (a :class:`UserError` naming it)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise UserError(f"path must be a file path (text or a pathlib.Path), not {path!r}")
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder; give a file name")
    validate.not_special("path", path, output=True)
    return path


class _Recording:
    """A file object that remembers the first ``OSError`` its ``write`` raised (for callers that wrap it)."""

    def __init__(self, f) -> None:
        self._f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def __getattr__(self, name: str):
        return getattr(self._f, name)


#: a temp file younger than this is left alone (its writer may be between mkstemp and its lock)
STALE_TEMP_S = 5.0


def remove_stale_temps(path: str | Path) -> int:
    """Remove the temp files of :func:`atomic_write_bytes` for ``path`` (``.NAME.XXXXXXXX.tmp`` beside it)
    that no writer holds: a killed process's lock is gone with it, a live writer's is held. Returns how
    many were removed."""
    path = Path(path)
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return 0
    removed = 0
    for name in names:
        middle = name[len(prefix):-len(".tmp")]
        if not (name.startswith(prefix) and name.endswith(".tmp") and len(middle) == 8 and "." not in middle):
            continue
        try:
            fd = os.open(path.parent / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if time.time() - os.fstat(fd).st_mtime >= STALE_TEMP_S:
                os.unlink(path.parent / name)
                removed += 1
        except OSError:  # locked by a live writer, or gone already
            pass
        finally:
            os.close(fd)
    return removed


class LockBusy(UserError):
    """:func:`file_lock` with ``wait=False`` found the lock held by another process."""


@contextlib.contextmanager
def file_lock(path: str | Path, *, wait: bool = True, busy: str | None = None) -> Iterator[None]:
    """Hold an exclusive lock (``flock``) on the file ``path`` (created) while the block runs; the file is
    removed when the lock is released, so none is left behind (not after a full disk either). ``wait=False``:
    when another process holds it, :class:`LockBusy` with the message ``busy`` at once.

    A lock file is only removed while it is held, and a process that got the lock checks that its file is
    still the one at ``path`` (else it locks the new one): two processes never both hold ``path``'s lock. A
    process killed while holding it leaves the file, unlocked: the next one takes it and removes it. The
    holder's process id is written into it (best effort) for the message a waiter gives."""
    path = Path(path)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
        except OSError as e:
            raise WriteFailed(e.errno, e.strerror, str(path)) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UserError(f"lock file {path} is {validate.special_kind(path) or 'not a regular file'}; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise LockBusy((busy or f"{path} is locked by another process") + holder) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # its holder removed it while this process waited
            same = False
        if same:
            break
        os.close(fd)
    try:
        with contextlib.suppress(OSError):  # a full disk may refuse even these few bytes: the lock still holds
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def lock_held(path: str | Path) -> str | None:
    """Whether another process holds :func:`file_lock` on ``path``: `` (process N)`` (or ``""``) when it does,
    None when not. Creates nothing (a probe before any write); the lock itself is still taken with
    :func:`file_lock`, which refuses the same way should a process take it in between."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _lock_holder(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


def _lock_holder(fd: int) -> str:
    """`` (process 1234)`` from a lock file's content, or ``""``."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (process {text})" if text.isdigit() else ""


def write_together(out_dir: str | Path, write: Callable[[Path], dict]) -> dict:
    """All of a set of files or none: ``write(folder)`` writes them into a hidden staging folder inside
    ``out_dir`` (same file system) and returns ``{key: path}``; each is then moved into ``out_dir`` (a rename
    needs no space). When ``write`` fails (a full disk), the staging folder is removed and ``out_dir`` holds
    what it held before: no lone ``audit.json`` without its ``audit.md``. Returns ``{key: final path}``."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _remove_stale_stages(out)
        stage = Path(tempfile.mkdtemp(prefix=".staging.", suffix=".tmp", dir=out))
    except OSError as e:
        raise WriteFailed(e.errno, e.strerror, str(out)) from None
    try:
        written = write(stage)
        final = {}
        for key, p in written.items():
            p = Path(p)
            target = out / p.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, target)
            final[key] = target
        return final
    except OSError as e:
        if e.errno is None:
            raise
        name = str(e.filename or out)
        if name.startswith(str(stage)):  # name the file where it was going, not the staging folder
            name = str(out / Path(name).relative_to(stage))
        raise WriteFailed(e.errno, e.strerror, name) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


#: a staging folder older than this is a killed writer's (a live one moves its files out in seconds)
STALE_STAGE_S = 3600.0


def _remove_stale_stages(out: Path) -> None:
    """Remove the staging folders of :func:`write_together` a killed process left in ``out``."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(out):
            if entry.name.startswith(".staging.") and entry.name.endswith(".tmp") and \
                    entry.is_dir(follow_symlinks=False) and time.time() - entry.stat().st_mtime > STALE_STAGE_S:
                shutil.rmtree(entry.path, ignore_errors=True)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode()))


def _plain(obj: Any) -> Any:
    """Keep only types ``weights_only`` can load."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if obj is None or isinstance(obj, torch.Tensor):
        return obj
    for t in (bool, int, float, str):  # exact builtins (TorchVersion, numpy scalars are subclasses)
        if isinstance(obj, t):
            return t(obj)
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return _plain(obj.item())
    return str(obj)


def save_checkpoint(model: nn.Module, path: str | Path, meta: dict | None = None) -> str:
    """Write ``model`` (built by :func:`unlearnkit.create_model`) with ``meta``; returns the sha256."""
    spec = dict(getattr(model, "unlearnkit_spec", {}) or {})
    if not spec:
        raise CheckpointError("save_checkpoint needs a model built by unlearnkit.create_model "
                              "(it records the architecture to rebuild it)")
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    digest = state_sha256(state)
    payload = {"format": FORMAT, "model": {"name": spec.pop("name"), "kwargs": _plain(spec)},
               "state_dict": state, "sha256": digest, "meta": _plain(meta or {})}
    atomic_write_bytes(path, lambda f: torch.save(payload, f))
    return digest


def read_checkpoint(path: str | Path) -> dict:
    """The payload, safely (weights_only) and checked by structure (:func:`check_structure`): a clear
    :class:`CheckpointError` naming the file for a missing, corrupt, truncated or misshapen one."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise CheckpointError(f"path must be a checkpoint file's path (text or a pathlib.Path), not {path!r}")
    p = Path(path).expanduser()
    kind = validate.special_kind(p)
    if kind is not None:  # never opened: reading a FIFO waits forever, /dev/zero never ends
        raise CheckpointError(f"checkpoint {p} is {kind}, not a regular file; it was not read")
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} {'is a folder, not a file' if p.is_dir() else 'does not exist'}")
    try:
        with warnings.catch_warnings():  # torch's warnings about a foreign pickle: the error below says it
            warnings.simplefilter("ignore")
            payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # zip errors, EOF, unpickling refusals...
        text = str(e)
        if "WeightsUnpickler error" in text:  # torch's advice around it is about trusting the file: not ours
            why = text.split("WeightsUnpickler error", 1)[1].strip(" :\n").split("\n\n")[0].strip()
            raise CheckpointError(f"checkpoint {p} is corrupt, truncated or holds more than tensors and plain "
                                  f"values (the safe loader refused it: {' '.join(why.split())[:120]})") from None
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()] or [type(e).__name__]
        raise CheckpointError(f"checkpoint {p} is corrupt or truncated ({lines[0][:120]})") from None
    check_structure(payload, p)
    return payload


def _kind(value: Any) -> str:
    """``a list``, ``an int``, ``a sparse tensor``: what a value is, for a message."""
    if isinstance(value, torch.Tensor) and value.layout != torch.strided:
        return f"a {str(value.layout).replace('torch.', '').replace('_', ' ')} tensor"
    name = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _check_state(state: Any, where: str) -> None:
    """A state dict: a non-empty mapping of text names to dense real (or integer/bool) tensors."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{where} holds {_kind(state)} where the state dict (name -> tensor) belongs")
    if not state:
        raise CheckpointError(f"{where} holds an empty state dict (no weights)")
    for key, value in state.items():
        if not isinstance(key, str):
            raise CheckpointError(f"{where} has a state dict key {key!r} ({_kind(key)}); parameter names are text")
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            raise CheckpointError(f"{where} holds {_kind(value)} at {key!r}, where a dense tensor belongs")
        if value.is_complex() or value.is_quantized:
            raise CheckpointError(f"{where} holds a {value.dtype} tensor at {key!r}; weights are real numbers")


def _plain_value(value: Any) -> bool:
    """None, a number, text, or lists / text-keyed mappings of those (a VFL model's ``bottom_kwargs``)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_value(v) for k, v in value.items())
    return isinstance(value, (list, tuple)) and all(_plain_value(v) for v in value)


def _is_ours(payload: dict) -> bool:
    fmt = payload.get("format")
    return isinstance(fmt, str) and fmt == FORMAT


def check_structure(payload: Any, path: str | Path) -> None:
    """Raise :class:`CheckpointError` naming ``path`` and what is wrong unless ``payload`` (what
    ``torch.load(weights_only=True)`` read) has a checkpoint's structure; returns None.

    An unlearnkit checkpoint (``format`` :data:`FORMAT`) needs ``model`` = ``{name: text, kwargs:
    {text: plain value}}``, a ``state_dict`` of text names -> dense tensors, a text ``sha256`` and a
    ``meta`` mapping with text keys (its ``key``, when present, a mapping). Anything else is read as a
    plain state dict (``{name: tensor}``, or such a dict under ``state_dict``), checked the same way.
    Every reader goes through here (:func:`read_checkpoint`), so no later step meets a ``KeyError``."""
    where = f"checkpoint {path}"
    if not isinstance(payload, dict):
        raise CheckpointError(f"{where} holds {_kind(payload)}, not a state dict or an unlearnkit checkpoint")
    fmt = payload.get("format")
    if isinstance(fmt, str) and fmt.startswith("unlearnkit.checkpoint/") and fmt != FORMAT:
        raise CheckpointError(f"{where} is in format {fmt!r}; this version reads {FORMAT!r}")
    if not _is_ours(payload):
        _check_state(payload["state_dict"] if "state_dict" in payload else payload, where)
        return
    for key in ("model", "state_dict", "sha256"):
        if key not in payload:
            raise CheckpointError(f"{where} has no {key!r} entry (an unlearnkit checkpoint holds model, "
                                  f"state_dict, sha256 and meta)")
    spec = payload["model"]
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"].strip():
        raise CheckpointError(f"{where}: 'model' must be {{name: text, kwargs: mapping}}, not {_kind(spec)}"
                              + (f" {spec!r}"[:60] if isinstance(spec, (str, int, float)) else ""))
    kwargs = spec.get("kwargs")
    if not isinstance(kwargs, dict):
        raise CheckpointError(f"{where}: the model's kwargs must be a mapping, not {_kind(kwargs)}")
    for key, value in kwargs.items():
        if not isinstance(key, str) or not key.isidentifier() or not _plain_value(value):
            raise CheckpointError(f"{where}: model kwarg {key!r} = {_kind(value)} is not a plain named value")
    _check_state(payload["state_dict"], where)
    if not isinstance(payload["sha256"], str):
        raise CheckpointError(f"{where}: 'sha256' must be text, not {_kind(payload['sha256'])}")
    meta = {} if payload.get("meta") is None else payload["meta"]
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise CheckpointError(f"{where}: 'meta' must be a mapping with text keys, not {_kind(meta)}")
    if not isinstance(meta.get("key", {}), (dict, type(None))):
        raise CheckpointError(f"{where}: meta 'key' must be a mapping, not {_kind(meta['key'])}")


def nonfinite_tensor(model: nn.Module) -> str | None:
    """The name of ``model``'s first parameter or buffer holding NaN or an infinity, or None."""
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not t.is_meta and not bool(torch.isfinite(t).all()):
            return name
    return None


def require_finite(model: nn.Module, what: str) -> nn.Module:
    """``model`` itself, unless a weight is NaN or infinite: then a :class:`CheckpointError` naming
    ``what`` (an argument or a file) and the tensor (an audit of such a model means nothing)."""
    bad = nonfinite_tensor(model)
    if bad is not None:
        raise CheckpointError(f"{what} has non-finite weights (NaN or inf in {bad}); a model with broken "
                              f"weights cannot be audited or unlearned")
    return model


def require_finite_models(**roles: Any) -> None:
    """:func:`require_finite` on each model given by its role (``original=m``, ``retrained=[m1, m2]``),
    naming the role (``retrained[1]`` in a list); returns None. Values that are not modules are left to
    the caller's own checks."""
    for role, value in roles.items():
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        for i, m in enumerate(items):
            if isinstance(m, nn.Module):
                require_finite(m, role if isinstance(value, nn.Module) else f"{role}[{i}]")


def load_checkpoint(path: str | Path, *, model_name: str | None = None, num_classes: int | None = None,
                    in_channels: int | None = None, image_size: int | None = None,
                    **model_kwargs) -> tuple[nn.Module, dict]:
    """Load ``(model, meta)``. An unlearnkit checkpoint rebuilds its own architecture; a plain
    ``state_dict`` (e.g. a torchvision/timm model saved by hand) needs ``model_name`` and
    ``num_classes``. Given ``model_name``/``num_classes`` that disagree with the file, or weights
    that do not fit the architecture, raise :class:`CheckpointError`.
    """
    from .models.zoo import create_model

    payload = read_checkpoint(path)
    if _is_ours(payload):
        spec = payload["model"]
        name, kwargs = spec["name"], dict(spec["kwargs"])
        state = payload["state_dict"]
        if state_sha256(state) != payload.get("sha256"):
            raise CheckpointError(f"checkpoint {path} failed its sha256 check (corrupt)")
        if model_name and model_name != name:
            raise CheckpointError(f"checkpoint {path} holds a {name!r}, not a {model_name!r}")
        if num_classes is not None and num_classes != kwargs.get("num_classes"):
            raise CheckpointError(f"checkpoint {path} has {kwargs.get('num_classes')} classes, expected {num_classes}")
        for key, want in (("in_channels", in_channels), ("image_size", image_size)):
            if want is not None and kwargs.get(key) is not None and want != kwargs[key]:
                raise CheckpointError(f"checkpoint {path} was built for {key.replace('_', ' ')} {kwargs[key]}, "
                                      f"but the data has {want} (another dataset?)")
        meta = dict(payload.get("meta") or {})
        meta["sha256"] = payload["sha256"]
    else:
        if not model_name or num_classes is None:
            raise CheckpointError(f"{path} is a plain state dict: give the architecture (--model) and the dataset")
        state = payload.get("state_dict", payload)  # its structure is checked (check_structure)
        name = model_name
        kwargs = {"num_classes": num_classes, "in_channels": in_channels or 3, "image_size": image_size or 32,
                  **model_kwargs}
        meta = {"sha256": state_sha256(state), "source": "plain state_dict"}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()}
    try:
        model = create_model(name, **kwargs)
    except (TypeError, ValueError, RuntimeError, KeyError, UserError) as e:  # unknown kwargs or name, bad values
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        detail = " ".join((text or type(e).__name__).split())[:160]
        raise CheckpointError(f"checkpoint {path}: cannot build its model {name} with "
                              f"{str(kwargs)[:120]}: {detail}") from None
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        detail = (first[1].strip() if len(first) > 1 else first[0])[:160]
        from .models.zoo import architecture_hint

        raise CheckpointError(f"checkpoint {path} does not fit {name} with {kwargs.get('num_classes')} classes: "
                              f"{detail}{architecture_hint(name, state)}") from None
    meta["model"] = {"name": name, "kwargs": kwargs}
    return model, meta
