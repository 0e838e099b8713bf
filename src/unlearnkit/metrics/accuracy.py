"""Classification accuracy in percent, the base of the UA / RA / TA / FA family.

Conventions differ between papers (reference-specs.md §2.1), and they are applied by the
caller, not here: SalUn reports UA = 100 − Acc(D_f), TARF reports Acc(D_f) itself (↓), PURGE
computes TA on the full test set including the forgotten class, SalUn without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import _to_numpy, as_labels


def accuracy(logits_or_preds: Any, labels: Any) -> float:
    """Percentage (0–100) of samples whose prediction equals the label.

    ``logits_or_preds`` is either (n, K) logits / probabilities (the prediction is the row
    argmax; ties go to the lowest class index, as ``torch.argmax`` and ``np.argmax`` do) or
    (n,) predicted class indices. Numpy arrays and torch tensors are both accepted.

    Returns ``float('nan')`` for empty input (no samples: accuracy is undefined, not 0).
    """
    y = as_labels(labels, "labels")
    out = _to_numpy(logits_or_preds)
    if out.ndim == 2:
        preds = out.argmax(axis=1) if out.shape[0] else np.zeros(0, dtype=np.int64)
    elif out.ndim == 1:
        preds = as_labels(out, "preds")
    else:
        raise ValueError(f"logits_or_preds must be 1-D or 2-D, got shape {out.shape}")
    if preds.shape[0] != y.shape[0]:
        raise ValueError(f"{preds.shape[0]} predictions but {y.shape[0]} labels")
    if y.size == 0:
        return float("nan")
    return float(100.0 * np.mean(preds == y))
