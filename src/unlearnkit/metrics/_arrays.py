"""Input conversion shared by the metrics: numpy arrays or torch tensors in, numpy out.

torch is never imported here; a tensor is recognised by its ``detach`` method, so the
metrics stay importable (and pure) without touching the rest of unlearnkit.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch.Tensor (any device, any dtype incl. bfloat16)
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.double()
        x = x.numpy()
    return np.asarray(x)


def as_float64(x: Any, name: str, ndim: int | None = None) -> np.ndarray:
    """Return ``x`` as a float64 numpy array; raise ValueError if ``ndim`` is given and differs."""
    arr = _to_numpy(x).astype(np.float64, copy=False)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


def as_labels(x: Any, name: str) -> np.ndarray:
    """Return ``x`` as a 1-D int64 array of class indices."""
    arr = _to_numpy(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.all(np.equal(np.mod(arr, 1), 0)):
        raise ValueError(f"{name} must hold integer class indices")
    return arr.astype(np.int64, copy=False)


def as_mask(x: Any, n: int, name: str) -> np.ndarray:
    """Return ``x`` as a 1-D bool array of length ``n`` (e.g. ``is_forget``)."""
    arr = _to_numpy(x)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must be 1-D of length {n}, got shape {arr.shape}")
    if arr.dtype != bool:
        if not np.all(np.isin(arr, (0, 1))):
            raise ValueError(f"{name} must be boolean (or 0/1)")
        arr = arr.astype(bool)
    return arr


def features_2d(x: Any, name: str) -> np.ndarray:
    """Return a 2-D float64 feature matrix (n, d); a 1-D input is read as n samples of d = 1."""
    arr = as_float64(x, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    return arr
