"""Fisher separability of forget vs retained features (Mirage's "F").

Reference: Mirage ``mirage_lib.py::feature_separability`` (reference-specs.md §2.5, pitfall
§6.7). Higher = the forgotten class is still a separate cluster in feature space.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_mask, features_2d


def _trace_cov(x: np.ndarray) -> float:
    """Tr Σ = Σ_j var(x_j, ddof=1), the trace of np.cov without forming the d×d matrix."""
    return float(np.sum(np.var(x, axis=0, ddof=1)))


def fisher_separability(
    features: Any,
    is_forget: Any,
    balanced: bool = False,
    seed: int = 0,
    mirage_compat: bool = False,
) -> float:
    """F = ‖μ_f − μ_r‖² / (Tr Σ_f + Tr Σ_r + 1e-10), a float ≥ 0.

    μ, Σ are the mean and covariance (ddof=1) of the forget rows (``is_forget``) and of the
    retained rows. Tr Σ is always Σ_j var(x_j, ddof=1) (= trace(np.cov(x.T)), in O(nd)).

    ``mirage_compat=True`` reproduces Mirage's code exactly: when d > n for a side it silently
    switches to ``np.var(x)`` (the ddof=0 variance of all entries ≈ Tr Σ / d, a scale
    inconsistency, e.g. CIFAR-100: 100 forget images vs d = 512), and it returns 0.0 for a side
    with < 2 rows or a non-finite result. Otherwise those cases return ``nan``.

    ``balanced=True`` follows the paper's text instead of its code: the retained side is a
    random draw (``np.random.default_rng(seed)``, without replacement) of |D_f| retained rows
    (all of them if fewer). Mirage's code (``balanced=False``) uses all retained rows.
    """
    x = features_2d(features, "features")
    mask = as_mask(is_forget, x.shape[0], "is_forget")
    f, r = x[mask], x[~mask]
    if balanced and r.shape[0] > f.shape[0]:
        pick = np.random.default_rng(seed).choice(r.shape[0], f.shape[0], replace=False)
        r = r[np.sort(pick)]
    if f.shape[0] < 2 or r.shape[0] < 2:
        return 0.0 if mirage_compat else float("nan")
    diff = f.mean(axis=0) - r.mean(axis=0)
    if mirage_compat:
        vf = _trace_cov(f) if f.shape[1] <= f.shape[0] else float(np.var(f))
        vr = _trace_cov(r) if r.shape[1] <= r.shape[0] else float(np.var(r))
    else:
        vf, vr = _trace_cov(f), _trace_cov(r)
    s = float(diff @ diff / (vf + vr + 1e-10))
    if mirage_compat and not np.isfinite(s):
        return 0.0
    return s
