"""Fisher-LDA statistics (metrics/lda.py) against independent computations, and their invariance."""
from __future__ import annotations

import math

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


def test_fewshot_head_reused_over_draws_matches_the_stacked_computation_with_a_ridge():
    """FewShotHead keeps the retained scatter once; each draw must equal standardising retain + shots
    stacked and using the ridge metric on them, by hand (numpy)."""
    from unlearnkit.metrics.lda import FewShotHead

    rng = np.random.RandomState(7)
    means = rng.randn(4, 6) * 1.2
    retain_y = np.repeat([0, 1, 2], 60)
    retain = (means[retain_y] + rng.randn(180, 6)) * np.array([1e3, 1, 1e-3, 5, 1, 1])  # units of any scale
    head = FewShotHead(torch.from_numpy(retain), torch.from_numpy(retain_y), ridge=0.01)
    for _ in range(4):  # draws of the shots
        shots = (means[3] + rng.randn(2, 6)) * np.array([1e3, 1, 1e-3, 5, 1, 1])
        queries = (means[3] + rng.randn(60, 6) * 1.5) * np.array([1e3, 1, 1e-3, 5, 1, 1])
        t = torch.from_numpy
        got = head.recovery(t(shots), t(np.array([3, 3])), t(queries), t(np.full(60, 3)))
        both = np.r_[retain, shots]
        mean, std = both.mean(0), both.std(0)
        z, zs, zq = (retain - mean) / std, (shots - mean) / std, (queries - mean) / std
        mus = np.stack([z[retain_y == c].mean(0) for c in range(3)] + [zs.mean(0)])
        resid = z - mus[retain_y]
        zb = np.r_[z, zs]
        metric = resid.T @ resid / len(z) + 0.01 * np.cov(zb.T, bias=True)
        inv = np.linalg.inv(metric)
        dist = np.stack([np.einsum("nd,de,ne->n", zq - m, inv, zq - m) for m in mus], 1)
        want = 100.0 * np.mean(dist.argmin(1) == 3)
        assert 0 < want < 100  # an informative case: some queries go elsewhere
        assert got == pytest.approx(want, abs=1e-9)
        assert fewshot_recovery(t(retain), t(retain_y), t(shots), t(np.array([3, 3])), t(queries),
                                t(np.full(60, 3))) == pytest.approx(got, abs=1e-9)


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


# --- the audit's statistic: U, its leave-one-out values, the ratio interval -----------------------------

def _u_by_hand(x: np.ndarray, y: np.ndarray) -> float:
    """U = (n-p-3)/(n-2) D² - p n/(n1 n0), D² with the pooled covariance (n - 2 dof), all units live."""
    n1, n0 = int(y.sum()), int((~y).sum())
    n, p = n1 + n0, x.shape[1]
    d = x[y].mean(0) - x[~y].mean(0)
    w = ((x[y] - x[y].mean(0)).T @ (x[y] - x[y].mean(0)) + (x[~y] - x[~y].mean(0)).T @ (x[~y] - x[~y].mean(0)))
    d2 = float(d @ np.linalg.solve(w / (n - 2), d))
    return (n - p - 3) / (n - 2) * d2 - p * n / (n1 * n0)


def test_unbiased_separability_matches_the_formula_and_its_leave_one_out_values():
    from unlearnkit.metrics.lda import unbiased_separability

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40, bool), np.zeros(160, bool)]
    x = rng.standard_normal((200, 12))
    x[y, 0] += 1.5
    s = unbiased_separability(x, y)
    assert s.status == "ok" and s.p == 12
    assert s.value == pytest.approx(_u_by_hand(x, y), rel=1e-9)
    for i in (0, 39, 40, 199):  # a forget row and a retained row, first and last
        keep = np.arange(200) != i
        assert s.loo[i] == pytest.approx(_u_by_hand(x[keep], y[keep]), rel=1e-8)


def test_unbiased_separability_is_invariant_to_extreme_rescaling_permutation_and_mixing():
    """Powers of two up to 2**+-100 (exact in float64, and no unit falls under the dead-unit cut: it is
    relative to each unit's own scale), a permutation and a random mixing leave U unchanged."""
    from unlearnkit.metrics.lda import unbiased_separability

    rng = np.random.default_rng(1)
    y = np.r_[np.ones(60, bool), np.zeros(240, bool)]
    x = rng.standard_normal((300, 16))
    x[y, :3] += 0.8
    base = unbiased_separability(x, y).value
    scaled = x * 2.0 ** rng.integers(-100, 101, 16)
    assert unbiased_separability(scaled[:, rng.permutation(16)], y).value == pytest.approx(base, rel=1e-9)
    assert unbiased_separability(x @ rng.standard_normal((16, 16)), y).value == pytest.approx(base, rel=1e-7)
    dead = np.c_[x, np.full(300, 3.0)]  # a constant unit carries nothing
    assert unbiased_separability(dead, y).value == pytest.approx(base, rel=1e-9)


def test_separated_groups_and_too_few_rows_are_never_a_finite_number():
    from unlearnkit.metrics.lda import unbiased_separability

    rng = np.random.default_rng(2)
    y = np.r_[np.ones(30, bool), np.zeros(90, bool)]
    x = rng.standard_normal((120, 5))
    x[:, 0] = np.where(y, 1.0, 0.0)  # a unit that is constant within each group and differs between them
    assert unbiased_separability(x, y).status == "separated"
    assert unbiased_separability(rng.standard_normal((120, 110)), y).status == "too_few_rows"


def test_ratio_interval_covers_in_a_small_simulation():
    """The nominal 95 % interval of U_u / U_r covers the true ratio (2.0) in most of 60 simulated audits
    (the full check at the audit's sizes: benchmarks/audit_coverage.py)."""
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(80, bool), np.zeros(320, bool)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 20 x 20 matrices: threads only contend (15x slower on a busy machine)
    try:
        hits = sum(_covers(rng, y) for _ in range(60))
    finally:
        torch.set_num_threads(threads)
    assert hits >= 51  # 85 %: a nominal-95 % interval misses more only when it is too narrow


def _covers(rng, y) -> bool:
    from unlearnkit.metrics.lda import ratio_interval, unbiased_separability

    base = rng.standard_normal((400, 20))
    xr = 0.5 * base + math.sqrt(0.75) * rng.standard_normal((400, 20))
    xu = 0.5 * base + math.sqrt(0.75) * rng.standard_normal((400, 20))
    xr[y, 0] += 2.0
    xu[y, 0] += 2.0 * math.sqrt(2.0)
    r = ratio_interval(unbiased_separability(xu, y), [unbiased_separability(xr, y)], y, 0.95)
    return r.low <= 2.0 <= r.high
