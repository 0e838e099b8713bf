"""Distances between two feature sets: Fréchet distance, paired cosine similarity and L2.

Reference: PURGE (``vedjaw/la_purge``; reference-specs.md §2.4): ``experiments/
fid_baselines.py::compute_fid`` (FID_feat between unlearned and retrained penultimate features
on D_f) and ``run.py::compute_feature_distance`` (cosine / L2 between unlearned and original
avgpool features of the same D_f images).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ._arrays import features_2d


def fid_feat(x: Any, y: Any) -> float:
    """Fréchet distance between Gaussians fit to x and y (FID_feat), a float ≥ 0.

    FD = ‖μ_x − μ_y‖² + Tr(Σ_x + Σ_y − 2 (Σ_x Σ_y)^{1/2}).

    As PURGE's ``compute_fid``: means and ``np.cov`` (ddof=1) of the rows, ``scipy.linalg.sqrtm``
    of Σ_x Σ_y, imaginary part (numerical noise) dropped. x and y may have different row counts
    but the same feature dimension. Difference: if sqrtm returns non-finite values (singular
    product), it is recomputed with 1e-6·I added to both covariances, as pytorch-fid does.
    Returns ``nan`` if either side has fewer than 2 rows.
    """
    from scipy.linalg import LinAlgWarning, sqrtm  # lazy: keep `import unlearnkit.metrics` light

    a, b = features_2d(x, "x"), features_2d(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x has {a.shape[1]} features, y has {b.shape[1]}")
    if a.shape[0] < 2 or b.shape[0] < 2:
        return float("nan")
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    cov_a = np.atleast_2d(np.cov(a, rowvar=False))
    cov_b = np.atleast_2d(np.cov(b, rowvar=False))
    with warnings.catch_warnings():  # near-singular products are common (PURGE: disp=False)
        warnings.simplefilter("ignore", LinAlgWarning)
        covmean = sqrtm(cov_a @ cov_b)
        if not np.all(np.isfinite(covmean)):
            offset = 1e-6 * np.eye(cov_a.shape[0])
            covmean = sqrtm((cov_a + offset) @ (cov_b + offset))
    covmean = np.real(covmean)
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * np.trace(covmean))


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
