"""Checkpoints: only tensors and plain types, atomic writes, sha256, provenance.

A checkpoint is a dict ``{"format", "model": {name, kwargs}, "state_dict", "sha256", "meta"}``
written with ``torch.save`` to a temporary file in the same folder and moved into place with
``os.replace`` (a crash never leaves a half-written checkpoint). ``sha256`` is over the state
dict's tensors (names, dtypes, shapes, bytes), so corruption that still unpickles is caught.
Loading always uses ``torch.load(weights_only=True)``: no code in a checkpoint is ever executed.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .errors import CheckpointError

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
    folder stays readable by the team (``mkstemp`` alone would leave it 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


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
    """The raw payload, safely: weights_only, and a clear error for missing/corrupt/truncated files."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise CheckpointError(f"checkpoint {p} does not exist")
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
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {p} holds a {type(payload).__name__}, not a state dict")
    return payload


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
    if payload.get("format") == FORMAT:
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
        meta = dict(payload.get("meta", {}))
        meta["sha256"] = payload["sha256"]
    else:
        if not model_name or num_classes is None:
            raise CheckpointError(f"{path} is a plain state dict: give the architecture (--model) and the dataset")
        state = payload.get("state_dict", payload)
        if not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(f"{path} is neither an unlearnkit checkpoint nor a state dict")
        name = model_name
        kwargs = {"num_classes": num_classes, "in_channels": in_channels or 3, "image_size": image_size or 32,
                  **model_kwargs}
        meta = {"sha256": state_sha256(state), "source": "plain state_dict"}
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()}
    model = create_model(name, **kwargs)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).strip().splitlines()
        detail = (first[1].strip() if len(first) > 1 else first[0])[:160]
        raise CheckpointError(f"checkpoint {path} does not fit {name} with {kwargs.get('num_classes')} classes: "
                              f"{detail}") from None
    meta["model"] = {"name": name, "kwargs": kwargs}
    return model, meta
