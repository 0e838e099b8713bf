"""The user's own data as an :class:`UnlearningSplit`: a ``Dataset``, a ``DataLoader`` or ``(x, y)`` tensors.

:func:`as_array_data` reads any of the three into memory once (the inputs exactly as the user's
pipeline yields them: already transformed and normalised, so unlearnkit's normalisation is the
identity and no augmentation is applied). :func:`user_split` puts forget / retain / test (and an
optional validation part) together:

* **class forgetting** when every class present in ``forget`` is absent from ``retain`` (the forgotten
  classes are those); the test set's rows of those classes are its forget part;
* **sample forgetting** otherwise (the forget set is a set of samples; all of test is retained data).

The training set is ``retain ++ forget`` (so the forget rows are the last ``len(forget)`` indices) and
the split hash is a sha256 of the forget set's inputs and labels.
"""
from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor

from ..errors import UserError
from .arrays import ArrayData, Augment
from .datasets import DatasetBundle
from .splits import ForgetSpec, UnlearningSplit


def _pair(item, where: str) -> tuple[Tensor, Tensor]:
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise UserError(f"{where} must yield (input, label) pairs, got {type(item).__name__}")
    x, y = item[0], item[1]
    return torch.as_tensor(x), torch.as_tensor(y)


def _from_loader(loader, where: str) -> tuple[Tensor, Tensor]:
    xs, ys = [], []
    for batch in loader:
        x, y = _pair(batch, where)
        xs.append(x)
        ys.append(y.reshape(-1))
    if not xs:
        raise UserError(f"{where} is empty")
    return torch.cat(xs), torch.cat(ys)


def _tensors(data, where: str) -> tuple[Tensor, Tensor]:
    """``(x, y)`` of a Dataset, a DataLoader or a pair of tensors/arrays."""
    if isinstance(data, ArrayData):
        return data.normalize(data.x), data.y
    if isinstance(data, torch.utils.data.DataLoader):
        return _from_loader(data, where)
    if isinstance(data, (tuple, list)) and len(data) == 2 and not isinstance(data[0], (tuple, list)):
        return torch.as_tensor(np.asarray(data[0]) if not isinstance(data[0], Tensor) else data[0]), \
            torch.as_tensor(np.asarray(data[1]) if not isinstance(data[1], Tensor) else data[1]).reshape(-1)
    if isinstance(data, torch.utils.data.Dataset):
        return _from_loader(torch.utils.data.DataLoader(data, batch_size=256, shuffle=False), where)
    raise UserError(f"{where} must be a torch Dataset, a DataLoader or an (x, y) pair of tensors, "
                    f"not {type(data).__name__}")


def as_array_data(data, where: str) -> ArrayData:
    """``data`` (Dataset, DataLoader or ``(x, y)``) in memory as float inputs and int64 labels; the
    inputs are kept as given (normalisation: the identity). A :class:`UserError` names ``where``."""
    x, y = _tensors(data, where)
    if x.shape[0] != y.shape[0]:
        raise UserError(f"{where} has {x.shape[0]} inputs but {y.shape[0]} labels")
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


def user_split(forget, retain=None, test=None, val=None, *, num_classes: int) -> UnlearningSplit:
    """An :class:`UnlearningSplit` of the user's parts (module docstring). ``retain``/``test``/``val`` may
    be None (an empty part). Each part is read with :func:`as_array_data`."""
    f = as_array_data(forget, "forget")
    none = f.subset(torch.zeros(0, dtype=torch.long))
    r, t, v = (as_array_data(p, k) if p is not None else none for k, p in (("retain", retain), ("test", test),
                                                                          ("val", val)))
    parts = {"forget": f, "retain": r, "test": t, "val": v}
    shapes = {k: tuple(p.x.shape[1:]) for k, p in parts.items() if len(p)}
    if len(set(shapes.values())) > 1:
        raise UserError(f"the parts' inputs differ in shape: {shapes}")
    _check_labels(parts, num_classes)
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
