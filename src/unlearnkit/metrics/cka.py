"""Linear centered kernel alignment (CKA) between two feature sets of the same samples.

Reference: Kornblith et al., "Similarity of Neural Network Representations Revisited" (ICML
2019), linear CKA in the feature-space form; Mirage ``mirage_lib.py::linear_CKA`` /
``compute_cka_similarity`` (reference-specs.md §2.5, pitfall §6.6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import features_2d

_EPS = 1e-10


def linear_cka(x: Any, y: Any, center: bool = True) -> float:
    """Linear CKA of features x (n, d₁) and y (n, d₂) of the same n samples, in [0, 1].

    CKA = ‖YᵀX‖_F² / (‖XᵀX‖_F · ‖YᵀY‖_F), computed in float64 in this feature form (d×d
    products, cheap for n ≫ d), equal to the n×n Gram form HSIC(K, L)/sqrt(HSIC(K,K) HSIC(L,L))
    with linear kernels.

    ``center=True`` (default) first subtracts each column's mean, as Kornblith et al. define
    it; it is invariant to orthogonal transforms, isotropic scaling and translation of either
    side. ``center=False`` reproduces Mirage's code, which does NOT center (an RV-like
    coefficient inflated towards 1 by the feature means); report which one was used.

    Returns 0.0 when the denominator is below 1e-10 (e.g. all-zero features, as Mirage's
    Fisher baseline produces) or the result is not finite, as Mirage does.
    """
    a, b = features_2d(x, "x"), features_2d(y, "y")
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"x and y must describe the same samples: {a.shape[0]} vs {b.shape[0]} rows")
    if center:
        a = a - a.mean(axis=0, keepdims=True)
        b = b - b.mean(axis=0, keepdims=True)
    num = np.linalg.norm(b.T @ a, "fro") ** 2
    den = np.linalg.norm(a.T @ a, "fro") * np.linalg.norm(b.T @ b, "fro")
    if not den >= _EPS:
        return 0.0
    r = float(num / den)
    return r if np.isfinite(r) else 0.0


def pairwise_linear_cka(xs: list[Any], pairs: list[tuple[int, int]], center: bool = True) -> list[float]:
    """:func:`linear_cka` of ``xs[i]`` and ``xs[j]`` for each ``(i, j)`` of ``pairs`` (all of the same
    samples), with each matrix centred and its ‖XᵀX‖_F computed once, not once per pair: the same
    numbers as calling :func:`linear_cka` pair by pair (a test compares them)."""
    mats = [features_2d(x, f"xs[{i}]") for i, x in enumerate(xs)]
    if len({m.shape[0] for m in mats}) > 1:
        raise ValueError(f"every matrix must describe the same samples, got {[m.shape[0] for m in mats]} rows")
    if center:
        mats = [m - m.mean(axis=0, keepdims=True) for m in mats]
    used = sorted({i for pair in pairs for i in pair})
    self_norm = {i: np.linalg.norm(mats[i].T @ mats[i], "fro") for i in used}
    out = []
    for i, j in pairs:
        den = self_norm[i] * self_norm[j]
        r = float(np.linalg.norm(mats[j].T @ mats[i], "fro") ** 2 / den) if den >= _EPS else 0.0
        out.append(r if np.isfinite(r) else 0.0)
    return out


def cka_subsample_indices(n: int, max_n: int = 5000, seed: int = 0) -> np.ndarray:
    """min(n, max_n) distinct row indices in [0, n), to use for EVERY pair of one comparison.

    Mirage subsamples 5000 test rows once and compares CKA(θ_u, θ_o) and CKA(θ_u, θ_r) on the
    same rows, with the global NumPy RNG (``np.random.choice``), whose state is not recorded.
    Here the draw is ``np.random.RandomState(seed).choice(n, m, replace=False)``, i.e. what
    Mirage's call gives right after ``np.random.seed(seed)``.
    """
    if n < 0 or max_n < 1:
        raise ValueError("need n >= 0 and max_n >= 1")
    return np.random.RandomState(seed).choice(n, min(n, max_n), replace=False).astype(np.int64)
