import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ortho_group

from unlearnkit.metrics import cka_subsample_indices, linear_cka


def gram_cka(x, y, center=True):
    """Independent n×n Gram-form CKA: HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)), K = XXᵀ, L = YYᵀ."""
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n if center else np.eye(n)
    gram_x, gram_y = h @ (x @ x.T) @ h, h @ (y @ y.T) @ h

    def hsic(a, b):
        return np.trace(a @ b) / (n - 1) ** 2

    return hsic(gram_x, gram_y) / np.sqrt(hsic(gram_x, gram_x) * hsic(gram_y, gram_y))


def test_hand_computed_one_feature_case():
    x = np.array([[1.0], [2.0], [3.0]])
    y = np.array([[1.0], [3.0], [2.0]])
    # centered: x=(-1,0,1), y=(-1,1,0): (yᵀx)² / (xᵀx · yᵀy) = 1 / 4 (= Pearson r²)
    assert linear_cka(x, y) == pytest.approx(0.25)
    # uncentered (Mirage): 13² / (14 · 14)
    assert linear_cka(x, y, center=False) == pytest.approx(169 / 196)


@pytest.mark.parametrize("center", [True, False])
def test_equals_gram_form(center):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 6)) + 2.0
    y = x @ rng.normal(size=(6, 9)) + rng.normal(size=(40, 9))
    assert linear_cka(x, y, center=center) == pytest.approx(gram_cka(x, y, center), rel=1e-10)
    assert linear_cka(torch.from_numpy(x).float(), torch.from_numpy(y).float(), center) == pytest.approx(
        gram_cka(x, y, center), rel=1e-5
    )


def _pair(seed, n, d1, d2):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d1)) * rng.uniform(0.5, 3.0, size=d1)
    y = np.tanh(x @ rng.normal(size=(d1, d2))) + 0.5 * rng.normal(size=(n, d2))
    return x, y


shapes = dict(
    seed=st.integers(0, 2**31 - 1), n=st.integers(8, 40), d1=st.integers(1, 8), d2=st.integers(1, 8)
)


@settings(max_examples=40, deadline=None)
@given(**shapes, scale=st.floats(1e-3, 1e3))
def test_invariant_to_orthogonal_transform_and_isotropic_scaling(seed, n, d1, d2, scale):
    x, y = _pair(seed, n, d1, d2)
    q = ortho_group.rvs(d1, random_state=seed) if d1 > 1 else np.array([[-1.0]])
    base = linear_cka(x, y)
    assert 0.0 <= base <= 1.0 + 1e-12
    assert linear_cka(x @ q, y) == pytest.approx(base, rel=1e-7, abs=1e-12)
    assert linear_cka(scale * x, y / scale) == pytest.approx(base, rel=1e-7, abs=1e-12)
    assert linear_cka(x, x @ q * scale) == pytest.approx(1.0)
    # uncentered CKA is also orthogonally invariant (rotation about the origin)
    assert linear_cka(x @ q, y, center=False) == pytest.approx(linear_cka(x, y, center=False), rel=1e-7)


@settings(max_examples=40, deadline=None)
@given(**shapes, shift=st.floats(-50, 50))
def test_centered_is_translation_invariant(seed, n, d1, d2, shift):
    x, y = _pair(seed, n, d1, d2)
    offset = shift * np.random.default_rng(seed + 1).normal(size=d2)
    assert linear_cka(x, y + offset) == pytest.approx(linear_cka(x, y), rel=1e-6, abs=1e-9)


def test_uncentered_changes_under_mean_shift():
    x, y = _pair(0, 50, 4, 4)
    assert linear_cka(x + 10.0, y + 10.0) == pytest.approx(linear_cka(x, y))
    shifted = linear_cka(x + 10.0, y + 10.0, center=False)
    assert shifted > 0.95  # the common mean dominates: Mirage's inflation towards 1
    assert abs(shifted - linear_cka(x, y, center=False)) > 0.1


def test_degenerate_inputs():
    x = np.random.default_rng(0).normal(size=(10, 3))
    assert linear_cka(np.zeros((10, 3)), x) == 0.0
    assert linear_cka(np.ones((10, 3)), x) == 0.0  # constant features vanish after centering
    with pytest.raises(ValueError, match="same samples"):
        linear_cka(x, x[:5])


def test_subsample_indices_match_seeded_global_choice():
    state = np.random.get_state()
    try:
        np.random.seed(3)
        expected = np.random.choice(10_000, 5000, replace=False)
    finally:
        np.random.set_state(state)
    idx = cka_subsample_indices(10_000, max_n=5000, seed=3)
    np.testing.assert_array_equal(idx, expected)
    assert len(np.unique(idx)) == 5000
    assert sorted(cka_subsample_indices(7, max_n=5000).tolist()) == list(range(7))


def test_pairwise_linear_cka_equals_pair_by_pair():
    from unlearnkit.metrics.cka import pairwise_linear_cka

    rng = np.random.default_rng(11)
    base = rng.normal(size=(120, 6))
    xs = [base @ rng.normal(size=(6, d)) + 0.3 * rng.normal(size=(120, d)) for d in (6, 4, 9)]
    xs.append(np.zeros((120, 3)))  # a degenerate side: 0, as linear_cka
    pairs = [(0, 1), (1, 2), (2, 0), (0, 3), (2, 2)]
    for center in (True, False):
        got = pairwise_linear_cka(xs, pairs, center=center)
        assert got == pytest.approx([linear_cka(xs[i], xs[j], center=center) for i, j in pairs], abs=1e-12)
    with pytest.raises(ValueError, match="same samples"):
        pairwise_linear_cka([xs[0], xs[1][:10]], [(0, 1)])
