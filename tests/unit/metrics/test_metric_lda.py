"""Fisher-LDA statistics (metrics/lda.py) against independent computations, and their invariance."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from unlearnkit.metrics.lda import auroc, fewshot_recovery, head_relearn, heldout_auroc, mahalanobis_separability


def _groups(seed=0, n_f=60, n_r=240, d=6, shift=1.0):
    rng = np.random.RandomState(seed)
    mix = rng.randn(d, d)
    x = np.r_[rng.randn(n_f, d) + shift, rng.randn(n_r, d)] @ mix
    y = np.r_[np.ones(n_f, bool), np.zeros(n_r, bool)]
    return x, y


def _d2_numpy(x, y, ridge):
    """Δμᵀ (Σ_w + ridge Σ_t)⁻¹ Δμ written out with numpy (ddof 0, Σ_w pooled by group size)."""
    f, r = x[y], x[~y]
    cf, cr = f - f.mean(0), r - r.mean(0)
    s_w = (cf.T @ cf + cr.T @ cr) / len(x)
    xt = x - x.mean(0)
    s_t = xt.T @ xt / len(x)
    d = f.mean(0) - r.mean(0)
    return float(d @ np.linalg.solve(s_w + ridge * s_t, d))


@pytest.mark.parametrize("ridge", [0.0, 0.01, 0.5])
def test_mahalanobis_separability_matches_the_formula(ridge):
    x, y = _groups()
    assert mahalanobis_separability(x, y, ridge=ridge) == pytest.approx(_d2_numpy(x, y, ridge), rel=1e-9)


def test_mahalanobis_separability_is_invariant_to_invertible_linear_maps():
    x, y = _groups(1)
    rng = np.random.RandomState(2)
    base = mahalanobis_separability(x, y)
    for a in (np.diag(10.0 ** rng.uniform(-3, 3, 6)), np.eye(6)[rng.permutation(6)], rng.randn(6, 6)):
        assert mahalanobis_separability(x @ a.T, y) == pytest.approx(base, rel=1e-7)
    # a dead unit adds nothing; a unit that fires only on the forget rows is seen, and stays finite
    dead = np.c_[x, np.zeros(len(x))]
    assert mahalanobis_separability(dead, y) == pytest.approx(base, rel=1e-7)
    flag = np.c_[x, y.astype(float)]
    d2 = mahalanobis_separability(flag, y, ridge=0.01)
    pf = y.mean()
    assert base < d2 <= 1.0 / (0.01 * pf * (1 - pf)) + 1e-6


def test_mahalanobis_separability_needs_two_rows_a_side():
    x, y = _groups()
    y = np.zeros(len(x), bool)
    y[0] = True
    assert np.isnan(mahalanobis_separability(x, y))


def test_auroc_matches_sklearn_with_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.RandomState(0)
    s = rng.randint(0, 5, 200).astype(float)
    t = rng.rand(200) < 0.3
    assert float(auroc(torch.from_numpy(s), torch.from_numpy(t))) == pytest.approx(roc_auc_score(t, s), abs=1e-12)


def test_heldout_auroc_equals_sklearn_lda_on_the_held_out_rows():
    """The discriminant direction Σ_t⁻¹Δμ ranks rows as sklearn's LDA (Σ_w⁻¹Δμ) does."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.metrics import roc_auc_score

    from unlearnkit.metrics.probes import stratified_split

    x, y = _groups(3, shift=0.4)
    splits = [stratified_split(y.astype(int), 0.3, 42 + i) for i in range(4)]
    train = torch.zeros(len(x), 4, dtype=torch.bool)
    test = torch.zeros_like(train)
    for j, (tr, te) in enumerate(splits):
        train[tr, j], test[te, j] = True, True
    ours = heldout_auroc(torch.from_numpy(x), torch.from_numpy(y), train, test).numpy()
    for j, (tr, te) in enumerate(splits):
        lda = LinearDiscriminantAnalysis(solver="lsqr").fit(x[tr], y[tr])
        assert ours[j] == pytest.approx(roc_auc_score(y[te], lda.decision_function(x[te])), abs=1e-9)


def test_fewshot_recovery_is_nearest_mean_in_the_within_class_metric():
    rng = np.random.RandomState(4)
    means = rng.randn(4, 5) * 3
    retain_y = np.repeat([0, 1, 2], 50)
    retain = means[retain_y] + rng.randn(150, 5)
    shots_y = np.array([3, 3])
    shots = means[3] + rng.randn(2, 5)
    queries = means[3] + rng.randn(40, 5) * 1.5
    got = fewshot_recovery(*(torch.from_numpy(a) for a in (retain, retain_y, shots, shots_y, queries,
                                                           np.full(40, 3))), ridge=0.0)
    # by hand: pooled within-class covariance of the retained classes, Mahalanobis nearest mean
    mus = np.stack([retain[retain_y == c].mean(0) for c in range(3)] + [shots.mean(0)])
    resid = retain - mus[retain_y]
    inv = np.linalg.inv(resid.T @ resid / len(retain))
    dist = np.stack([np.einsum("nd,de,ne->n", queries - m, inv, queries - m) for m in mus], 1)
    assert got == pytest.approx(100.0 * np.mean(dist.argmin(1) == 3), abs=1e-9)


def _head_case(seed=5):
    rng = np.random.RandomState(seed)
    means = rng.randn(4, 6) * 2
    y = np.repeat(np.arange(4), 40)
    x = means[y] + rng.randn(160, 6)
    w, b = rng.randn(4, 6), rng.randn(4)
    b[3] = -3.0  # class 3 hidden behind its bias
    return x, y, w, b


def test_head_relearn_without_steps_is_the_models_own_head():
    """Writing the head in whitened coordinates changes no logit: zero steps = the head's accuracy."""
    x, y, w, b = _head_case()
    t = torch.from_numpy
    got = head_relearn(t(x[y < 3]), t(x[:8]), t(y[:8]), t(x), t(y), weight=t(w), bias=t(b), steps=0)
    assert got == pytest.approx(100.0 * np.mean((x @ w.T + b).argmax(1) == y), abs=1e-9)


def test_head_relearn_is_the_same_attack_under_any_invertible_linear_map():
    x, y, w, b = _head_case()
    rng = np.random.RandomState(6)
    a = rng.randn(6, 6) + 3 * np.eye(6)
    t = torch.from_numpy
    shots = np.r_[np.flatnonzero(y == 3)[:5], np.flatnonzero(y == 0)[:5]]
    held = np.setdiff1d(np.flatnonzero(y == 3), shots)
    base = head_relearn(t(x[y < 3]), t(x[shots]), t(y[shots]), t(x[held]), t(y[held]), weight=t(w), bias=t(b),
                        steps=10, lr=0.2)
    xa, wa = x @ a.T, w @ np.linalg.inv(a)  # features mixed, head compensating: the same function
    moved = head_relearn(t(xa[y < 3]), t(xa[shots]), t(y[shots]), t(xa[held]), t(y[held]), weight=t(wa),
                         bias=t(b), steps=10, lr=0.2)
    assert moved == pytest.approx(base, abs=1e-9)
    hidden = head_relearn(t(x[y < 3]), t(x[shots]), t(y[shots]), t(x[held]), t(y[held]), weight=t(w),
                          bias=t(b), steps=0)
    assert hidden == 0.0 and base > 50.0  # the class behind the bias comes back in ten steps
