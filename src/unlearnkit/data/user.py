"""The user's own data as an :class:`UnlearningSplit`: a ``Dataset``, a ``DataLoader`` or ``(x, y)`` tensors.

:func:`as_array_data` reads any of the three into memory once (the inputs exactly as the user's
pipeline yields them: already transformed and normalised, so unlearnkit's normalisation is the
identity and no augmentation is applied). Items are ``(input, label)`` pairs or dicts (a Hugging Face
dataset's rows: ``pixel_values`` / ``image`` / ``input`` / ``x`` and ``label`` / ``labels`` / ``y``
unless other keys are named); any sized, indexable dataset is read, a ``datasets.Dataset`` included.
Inputs may be images ``[N, C, H, W]`` or flat rows ``[N, D]``. :func:`user_split` puts forget / retain / test (and an
optional validation part) together:

* **class forgetting** when every class present in ``forget`` is absent from ``retain`` (the forgotten
  classes are those); the test set's rows of those classes are its forget part;
* **sample forgetting** otherwise (the forget set is a set of samples; all of test is retained data).

The training set is ``retain ++ forget`` (so the forget rows are the last ``len(forget)`` indices) and
the split hash is a sha256 of the forget set's inputs and labels.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from .arrays import ArrayData, Augment
from .datasets import DatasetBundle
from .splits import ForgetSpec, UnlearningSplit

#: the keys read from a dict-yielding dataset (Hugging Face's convention) when none is named, in order
INPUT_KEYS = ("pixel_values", "image", "input", "x")
LABEL_KEYS = ("label", "labels", "y")


@dataclass(frozen=True)
class Keys:
    """Which entries of a dict item are the input and the label (None: the first of :data:`INPUT_KEYS` /
    :data:`LABEL_KEYS` the item has)."""

    input: str | None = None
    label: str | None = None

    def pick(self, item: Mapping, where: str) -> tuple[object, object]:
        return self._one(item, self.input, INPUT_KEYS, "input", where), \
            self._one(item, self.label, LABEL_KEYS, "label", where)

    @staticmethod
    def _one(item: Mapping, named: str | None, defaults: tuple[str, ...], what: str, where: str) -> object:
        if named is not None:
            if named not in item:
                raise UserError(f"{where} yields dicts without the {what} key {named!r} ({what}_key); its keys: "
                                f"{', '.join(map(repr, list(item)[:10]))}")
            return item[named]
        for key in defaults:
            if key in item:
                return item[key]
        raise UserError(f"{where} yields dicts with none of the {what} keys {', '.join(defaults)}: name it with "
                        f"{what}_key=... (its keys: {', '.join(map(repr, list(item)[:10]))})")


def _pair(item, where: str, keys: Keys) -> tuple[object, object]:
    """``(input, label)`` of one item or batch: a pair, or a dict (:class:`Keys`)."""
    if isinstance(item, Mapping):
        return keys.pick(item, where)
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise UserError(f"{where} must yield (input, label) pairs or dicts, got {type(item).__name__}")
    return item[0], item[1]


def _holds_values(t: Tensor, where: str, what: str) -> None:
    """A tensor on the ``meta`` device has a shape but no values: a :class:`UserError` naming ``where``."""
    if t.is_meta:
        raise UserError(f"{where}: its {what} are on the meta device (a shape without values); load the data "
                        f"first (e.g. build the tensors on cpu)")


def _inputs(x, where: str) -> Tensor:
    """``x`` as a tensor of numbers; a :class:`UserError` naming ``where`` for text or objects."""
    if isinstance(x, Tensor):
        _holds_values(x, where, "inputs")
        if x.is_complex() or x.dtype == torch.bool:
            raise UserError(f"{where}: inputs must be real numbers, got {x.dtype}")
        return x
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise UserError(f"{where}: inputs must be numbers (tensors or arrays), got {arr.dtype} values")
    return torch.as_tensor(arr)


def _labels(y, where: str) -> Tensor:
    """``y`` as a flat tensor of numbers; class names (text) are refused with a :class:`UserError`."""
    if not isinstance(y, Tensor):
        arr = np.asarray(y)
        if arr.dtype.kind not in "biuf":
            shown = arr.reshape(-1)[:1].tolist()
            raise UserError(f"{where}: labels must be class indices (integers), got {arr.dtype} values such as "
                            f"{shown[0] if shown else arr.dtype!r}; map class names to 0..K-1 first")
        y = torch.as_tensor(arr)
    _holds_values(y, where, "labels")
    if y.is_complex():
        raise UserError(f"{where}: labels must be class indices (integers), got {y.dtype}")
    return y.reshape(-1)


def _collate(items: list, where: str, keys: Keys) -> tuple[Tensor, Tensor]:
    """One batch of a map-style dataset's items, each read with :func:`_pair`."""
    pairs = [_pair(item, where, keys) for item in items]
    try:
        x = torch.stack([_inputs(p[0], where) for p in pairs])
    except RuntimeError as e:
        raise UserError(f"{where}: its items' inputs differ in shape ({str(e).splitlines()[0]})") from None
    return x, torch.cat([_labels(p[1], where) for p in pairs])


def _from_loader(loader, where: str, keys: Keys) -> tuple[Tensor, Tensor]:
    xs, ys = [], []
    for batch in loader:
        x, y = _pair(batch, where, keys)
        xs.append(_inputs(x, where))
        ys.append(_labels(y, where))
    if not xs:
        raise UserError(f"{where} is empty")
    return torch.cat(xs), torch.cat(ys)


def _map_style(data) -> bool:
    """A dataset read by index: a torch Dataset, or any sized indexable (a Hugging Face ``datasets.Dataset``)."""
    if isinstance(data, torch.utils.data.IterableDataset):
        return False
    return isinstance(data, torch.utils.data.Dataset) or (
        hasattr(data, "__getitem__") and hasattr(data, "__len__") and not isinstance(data, (str, bytes)))


def _reader(where: str, keys: Keys):
    """The collate function of a map-style dataset's loader: items read with :func:`_pair`."""
    return lambda items: _collate(items, where, keys)


def _tensors(data, where: str, keys: Keys) -> tuple[Tensor, Tensor]:
    """``(x, y)`` of a Dataset (any sized, indexable one, a list of items included), a DataLoader, a pair of
    tensors/arrays or a dict of columns."""
    if isinstance(data, ArrayData):
        return data.normalize(data.x), data.y
    if isinstance(data, torch.utils.data.DataLoader):
        return _from_loader(data, where, keys)
    if isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data[0], (tuple, list, Mapping)):
        return _inputs(data[0], where), _labels(data[1], where)
    if isinstance(data, Mapping):  # columns: {"pixel_values": [N, ...], "label": [N]}
        x, y = keys.pick(data, where)
        return _inputs(x, where), _labels(y, where)
    if isinstance(data, torch.utils.data.IterableDataset):
        return _from_loader(torch.utils.data.DataLoader(data, batch_size=256), where, keys)
    if _map_style(data) and not isinstance(data, (Tensor, np.ndarray)):
        loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=False, collate_fn=_reader(where, keys))
        return _from_loader(loader, where, keys)
    raise UserError(f"{where} must be a Dataset (of pairs or dicts), a DataLoader or an (x, y) pair of tensors, "
                    f"not {type(data).__name__}")


def as_array_data(data, where: str, *, input_key: str | None = None, label_key: str | None = None) -> ArrayData:
    """``data`` (Dataset, DataLoader or ``(x, y)``) in memory as float inputs and int64 labels; the
    inputs are kept as given (normalisation: the identity). Items may be ``(input, label)`` pairs or
    dicts (Hugging Face's convention): the input is ``item[input_key]``, else the first of
    :data:`INPUT_KEYS` present, the label ``item[label_key]``, else the first of :data:`LABEL_KEYS`.
    Any :class:`UserError` names ``where``."""
    x, y = _tensors(data, where, Keys(input_key, label_key))
    if x.dim() < 1 or x.shape[0] != y.shape[0]:
        raise UserError(f"{where} has {x.shape[0] if x.dim() else 0} inputs but {y.shape[0]} labels")
    if x.dim() < 2 or not len(y):
        raise UserError(f"{where} needs at least one row of inputs shaped [N, ...], got {tuple(x.shape)}")
    if y.is_floating_point() and not torch.equal(y, y.round()):
        raise UserError(f"{where}: labels must be class indices (integers), got {y.dtype} values such as "
                        f"{y[~torch.eq(y, y.round())][0].item()}")
    x = x.detach().cpu().to(torch.get_default_dtype())
    if not bool(torch.isfinite(x).all()):
        raise UserError(f"{where} has non-finite inputs (NaN or inf)")
    channels = x.shape[1] if x.dim() >= 3 else 1
    return ArrayData(x.contiguous(), y.detach().cpu().long(), (0.0,) * channels, (1.0,) * channels)


def _check_labels(parts: dict[str, ArrayData], num_classes: int) -> None:
    for where, part in parts.items():
        if len(part) and (int(part.y.min()) < 0 or int(part.y.max()) >= num_classes):
            raise UserError(f"{where} has labels outside 0..{num_classes - 1} (the model has {num_classes} "
                            f"outputs): {sorted(set(part.y.tolist()) - set(range(num_classes)))[:5]}")


def _row_digests(data: ArrayData) -> list[bytes]:
    x = data.x.reshape(len(data), -1).numpy()
    y = data.y.numpy()
    return [hashlib.blake2b(x[i].tobytes() + y[i].tobytes(), digest_size=16).digest() for i in range(len(data))]


def shared_rows(forget: ArrayData, retain: ArrayData) -> int:
    """How many rows of ``forget`` also appear in ``retain``, inputs and label identical (a hash of each row)."""
    if not len(forget) or not len(retain):
        return 0
    kept = set(_row_digests(retain))
    return sum(d in kept for d in _row_digests(forget))


def user_split(forget, retain=None, test=None, val=None, *, num_classes: int) -> UnlearningSplit:
    """An :class:`UnlearningSplit` of the user's parts (module docstring). ``retain``/``test``/``val`` may
    be None (an empty part). Each part is read with :func:`as_array_data`; a :class:`UserError` when the
    parts' inputs differ in shape, a label is outside ``0..num_classes-1``, or a forget row also appears
    in ``retain`` (:func:`shared_rows`)."""
    f = as_array_data(forget, "forget")
    none = f.subset(torch.zeros(0, dtype=torch.long))
    r, t, v = (as_array_data(p, k) if p is not None else none for k, p in (("retain", retain), ("test", test),
                                                                          ("val", val)))
    parts = {"forget": f, "retain": r, "test": t, "val": v}
    shapes = {k: tuple(p.x.shape[1:]) for k, p in parts.items() if len(p)}
    if len(set(shapes.values())) > 1:
        raise UserError(f"the parts' inputs differ in shape: {shapes}")
    _check_labels(parts, num_classes)
    shared = shared_rows(f, r)
    if shared:
        raise UserError(f"{'all' if shared == len(f) else shared} of the {len(f)} forget rows also appear in retain "
                        f"(identical inputs and labels): a sample cannot be forgotten and retained; take them out "
                        f"of retain")
    forget_classes = sorted(set(f.y.tolist()))
    whole = not set(forget_classes) & set(r.y.tolist())
    spec = ForgetSpec(classes=tuple(forget_classes)) if whole else ForgetSpec(samples=len(f))
    train = ArrayData.concat([r, f])
    train.index = torch.arange(len(train))
    n_r = len(r)
    train_forget, train_retain = train.subset(torch.arange(n_r, len(train))), train.subset(torch.arange(n_r))
    in_forget = torch.as_tensor(np.isin(t.y.numpy(), forget_classes)) if whole else torch.zeros(len(t), dtype=bool)
    bundle = DatasetBundle("user", train, v, t, num_classes, [str(c) for c in range(num_classes)], Augment())
    digest = hashlib.sha256(f.x.numpy().tobytes() + f.y.numpy().tobytes()).hexdigest()[:16]
    return UnlearningSplit(bundle, spec, np.arange(n_r, len(train)), train_forget, train_retain,
                           t.subset(torch.nonzero(in_forget).flatten()), t.subset(torch.nonzero(~in_forget).flatten()),
                           t, v, digest)


def load_tensor_file(path, where: str, *, num_classes: int) -> tuple[Tensor, Tensor]:
    """``(x, y)`` of a tensor file: ``torch.save`` of ``{"x": Tensor, "y": Tensor}`` or of a tuple ``(x, y)``,
    read with ``weights_only=True`` (nothing in the file is executed). ``x`` holds real numbers shaped
    ``[N, ...]`` (N >= 1, all finite), ``y`` integer class indices shaped ``[N]`` in ``0..num_classes-1``;
    anything else is a :class:`UserError` naming ``where`` (e.g. ``--forget-data f.pt``)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # zip errors, EOF, the safe loader refusing a pickled object
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"{where} cannot be read as a tensor file (torch.save of {{'x': x, 'y': y}} or (x, y); "
                        f"{' '.join(first.split())[:120]})") from None
    if isinstance(payload, Mapping):
        missing = [k for k in ("x", "y") if k not in payload]
        if missing:
            raise UserError(f"{where} holds a dict without the key(s) {', '.join(map(repr, missing))}; save "
                            f"{{'x': inputs, 'y': labels}} (its keys: {', '.join(map(repr, list(payload)[:10]))})")
        x, y = payload["x"], payload["y"]
    elif isinstance(payload, (tuple, list)) and len(payload) == 2:
        x, y = payload
    else:
        raise UserError(f"{where} holds {type(payload).__name__}; save {{'x': inputs, 'y': labels}} or "
                        f"(inputs, labels)")
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, Tensor):
            raise UserError(f"{where}: {name} must be a tensor, not {type(t).__name__}")
    if x.is_complex() or x.dtype == torch.bool:
        raise UserError(f"{where}: x must hold real numbers, not {x.dtype}")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise UserError(f"{where}: y must hold integer class indices, not {y.dtype} (convert with y.long())")
    if x.dim() < 2 or y.dim() != 1 or x.shape[0] != y.shape[0] or not len(y):
        raise UserError(f"{where}: x must be shaped [N, ...] and y [N] with N >= 1, got x {tuple(x.shape)} and "
                        f"y {tuple(y.shape)}")
    if not bool(torch.isfinite(x.float()).all()):
        raise UserError(f"{where}: x has non-finite values (NaN or inf)")
    outside = sorted(set(y[(y < 0) | (y >= num_classes)].tolist()))
    if outside:
        raise UserError(f"{where}: labels must lie in 0..{num_classes - 1} (the dataset's classes), got "
                        f"{', '.join(map(str, outside[:5]))}")
    return x, y
