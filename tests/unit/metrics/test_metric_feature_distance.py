import math

import numpy as np
import pytest
import torch
from sklearn.metrics.pairwise import paired_cosine_distances, paired_euclidean_distances

from unlearnkit.metrics import fid_feat, mean_cosine_similarity, mean_l2


def test_fid_one_dimensional_closed_form():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 2.0, size=500), rng.normal(-0.5, 0.7, size=300)
    expected = (a.mean() - b.mean()) ** 2 + (a.std(ddof=1) - b.std(ddof=1)) ** 2
    assert fid_feat(a[:, None], b[:, None]) == pytest.approx(expected, rel=1e-10)


def test_fid_identity_is_zero():
    x = np.random.default_rng(1).normal(size=(200, 6))
    assert abs(fid_feat(x, x)) < 1e-8
    assert abs(fid_feat(x, x[::-1])) < 1e-8  # row order is irrelevant


def test_fid_matches_purge_sqrtm_formula():
    """An independent reference: PURGE's / pytorch-fid's route, scipy's sqrtm of the product Σ1 Σ2."""
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(2)
    a = rng.normal(size=(400, 5)) @ rng.normal(size=(5, 5))
    b = rng.normal(size=(300, 5)) @ rng.normal(size=(5, 5)) + 0.3
    s1, s2 = np.cov(a.T), np.cov(b.T)
    mu = a.mean(0) - b.mean(0)
    expected = mu @ mu + np.trace(s1) + np.trace(s2) - 2 * np.trace(np.real(sqrtm(s1 @ s2)))
    assert fid_feat(a, torch.from_numpy(b)) == pytest.approx(expected, rel=1e-8)


def test_fid_singular_covariance_stays_finite_and_small_n_nan():
    rng = np.random.default_rng(3)
    a = np.c_[rng.normal(size=(50, 2)), np.zeros(50)]  # rank-deficient
    b = np.c_[rng.normal(size=(50, 2)), np.zeros(50)]
    assert np.isfinite(fid_feat(a, b))
    assert math.isnan(fid_feat(a[:1], b))


def test_cosine_and_l2_match_sklearn_and_torch():
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(80, 12)), rng.normal(size=(80, 12)) + 0.5
    assert mean_cosine_similarity(x, y) == pytest.approx(1 - paired_cosine_distances(x, y).mean())
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    torch_cos = torch.nn.functional.cosine_similarity(tx, ty).mean().item()
    assert mean_cosine_similarity(tx, ty) == pytest.approx(torch_cos)
    assert mean_l2(x, y) == pytest.approx(paired_euclidean_distances(x, y).mean())
    assert mean_cosine_similarity(x, 3 * x) == pytest.approx(1.0)
    assert mean_l2(x, x) == 0.0


def test_paired_shape_mismatch_raises():
    with pytest.raises(ValueError, match="row-paired"):
        mean_l2(np.zeros((3, 2)), np.zeros((4, 2)))
