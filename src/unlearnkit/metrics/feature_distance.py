"""Distances between two feature sets: Fréchet distance, paired cosine similarity and L2.

Reference: PURGE (``vedjaw/la_purge``; reference-specs.md §2.4): ``experiments/
fid_baselines.py::compute_fid`` (FID_feat between unlearned and retrained penultimate features
on D_f) and ``run.py::compute_feature_distance`` (cosine / L2 between unlearned and original
avgpool features of the same D_f images).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import features_2d


def fid_feat(x: Any, y: Any) -> float:
    """Fréchet distance between Gaussians fit to x and y (FID_feat), a float ≥ 0.

    FD = ‖μ_x − μ_y‖² + Tr(Σ_x + Σ_y − 2 (Σ_x Σ_y)^{1/2}).

    As PURGE's ``compute_fid``: means and ``np.cov`` (ddof=1) of the rows. Difference: PURGE (and
    pytorch-fid) take ``scipy.linalg.sqrtm`` of the non-symmetric product Σ_x Σ_y and drop its imaginary
    part; here Tr (Σ_x Σ_y)^{1/2} is computed as Σ_i sqrt(λ_i) over the eigenvalues of the symmetric
    Σ_x^{1/2} Σ_y Σ_x^{1/2} (``numpy.linalg.eigh``; the same eigenvalues as Σ_x Σ_y, negative rounding
    clipped to 0): the same number in exact arithmetic (a test checks it against ``sqrtm``), stable
    where the product is singular (no 1e-6·I offset needed), several times faster, and free of
    ``sqrtm``'s LinAlgWarning, which ``warnings.catch_warnings`` cannot silence from the audit's
    parallel threads. Returns ``nan`` if either side has fewer than 2 rows.
    """
    a, b = features_2d(x, "x"), features_2d(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x has {a.shape[1]} features, y has {b.shape[1]}")
    if a.shape[0] < 2 or b.shape[0] < 2:
        return float("nan")
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a = np.atleast_2d(np.cov(a, rowvar=False))
    cov_b = np.atleast_2d(np.cov(b, rowvar=False))
    evals, evecs = np.linalg.eigh(cov_a)
    root_a = (evecs * np.sqrt(np.clip(evals, 0.0, None))) @ evecs.T
    inner = root_a @ cov_b @ root_a
    tr_covmean = float(np.sqrt(np.clip(np.linalg.eigvalsh((inner + inner.T) / 2), 0.0, None)).sum())
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * tr_covmean)


def _paired(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = features_2d(x, "x"), features_2d(y, "y")
    if a.shape != b.shape:
        raise ValueError(f"x and y must be row-paired with the same shape, got {a.shape} and {b.shape}")
    return a, b


def mean_cosine_similarity(x: Any, y: Any, eps: float = 1e-8) -> float:
    """Mean over rows i of cos(x_i, y_i), in [−1, 1]; ``nan`` for no rows.

    Rows are paired (the same sample under two models). Each norm is clamped at ``eps`` as in
    ``torch.nn.functional.cosine_similarity`` (PURGE ``run.py::compute_feature_distance``).
    """
    a, b = _paired(x, y)
    if a.shape[0] == 0:
        return float("nan")
    na = np.maximum(np.linalg.norm(a, axis=1), eps)
    nb = np.maximum(np.linalg.norm(b, axis=1), eps)
    return float(np.mean(np.sum(a * b, axis=1) / (na * nb)))


def mean_l2(x: Any, y: Any) -> float:
    """Mean over rows i of ‖x_i − y_i‖₂ (PURGE's "L2 dist"); ``nan`` for no rows."""
    a, b = _paired(x, y)
    if a.shape[0] == 0:
        return float("nan")
    return float(np.mean(np.linalg.norm(a - b, axis=1)))
