"""The kernel two-sample statistic (metrics/two_sample.py) against independent computations: its value,
its leave-one-out values, its invariance, its saturation flags and the coverage of its ratio interval."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from unlearnkit.metrics.two_sample import jackknife_cov, mmd_two_sample, ratio_interval, select_rows


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small matrices: one thread is fastest, and on a busy machine extra threads only wait."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _groups(seed=0, n_f=30, n_r=120, d=8, shift=1.0, scale=1.6):
    """Forget rows shifted in mean along unit 0 and scaled along units 1-3, then mixed."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_f + n_r, d))
    x[:n_f, 0] += shift
    x[:n_f, 1:4] *= scale
    y = np.r_[np.ones(n_f, bool), np.zeros(n_r, bool)]
    return x @ (np.eye(d) + 0.3 * rng.standard_normal((d, d))), y


def _mmd_by_hand(x, y):
    """MMD²_u of Gretton et al. (2012, eq. 3) written out: whitening by the total covariance (ddof 0,
    numpy), Gaussian kernel exp(−d²/(2 s²)) with s the median pairwise distance, explicit loops."""
    xc = x - x.mean(0)
    evals, evecs = np.linalg.eigh(xc.T @ xc / len(x))
    z = xc @ evecs / np.sqrt(evals)
    n = len(z)
    d2 = np.array([[float(np.sum((z[i] - z[j]) ** 2)) for j in range(n)] for i in range(n)])
    s2 = float(np.median([d2[i, j] for i in range(n) for j in range(i + 1, n)]))
    k = np.exp(-d2 / (2 * s2))
    f, r = np.flatnonzero(y), np.flatnonzero(~y)
    m, nr = len(f), len(r)
    kff = sum(k[i, j] for i in f for j in f if i != j) / (m * (m - 1))
    krr = sum(k[i, j] for i in r for j in r if i != j) / (nr * (nr - 1))
    kfr = sum(k[i, j] for i in f for j in r) / (m * nr)
    return kff + krr - 2 * kfr


def test_value_matches_a_hand_written_formula():
    x, y = _groups(n_f=6, n_r=9, d=3)  # 15 rows: 105 pairs, an odd count, so the median is one of them
    assert mmd_two_sample(x, y).value == pytest.approx(_mmd_by_hand(x, y), rel=1e-9)


def test_value_is_invariant_to_extreme_rescaling_permutation_and_mixing():
    x, y = _groups(1)
    x = np.c_[x, np.full(len(x), 3.0)]  # a dead unit, dropped whatever its scale
    base = mmd_two_sample(x, y)
    assert base.p == 8 and not base.saturated and base.value > 0
    rng = np.random.default_rng(2)
    d = x.shape[1]
    maps = [np.diag(2.0 ** rng.choice([-100, -40, 0, 40, 100], d)), np.eye(d)[rng.permutation(d)]]
    q, _ = np.linalg.qr(rng.standard_normal((d - 1, d - 1)))
    mix = np.eye(d)
    mix[:-1, :-1] = q @ np.diag(rng.uniform(0.5, 2.0, d - 1))  # well-conditioned mixing of the live units
    maps.append(mix)
    for a in maps:
        other = mmd_two_sample(x @ a, y)
        assert other.p == base.p
        assert other.value == pytest.approx(base.value, rel=1e-6)
        assert other.var == pytest.approx(base.var, rel=1e-6)
        np.testing.assert_allclose(other.loo, base.loo, rtol=1e-6)


def test_a_unit_scaled_by_two_to_the_minus_100_is_not_dead():
    x, y = _groups(3)
    x[:, 0] *= 2.0 ** -100  # the informative unit, tiny next to the others
    assert mmd_two_sample(x, y).p == x.shape[1]


def test_kernel_leave_one_out_values_equal_brute_force():
    x, y = _groups(4, n_f=12, n_r=30, d=4)
    stat = mmd_two_sample(x, y)
    z = stat.whitened.numpy()
    k = np.exp(-((z[:, None] - z[None]) ** 2).sum(-1) / (2 * stat.bandwidth ** 2))
    m = stat.n_forget

    def mmd_u(keep):
        kk, f = k[np.ix_(keep, keep)], keep < m
        off = ~np.eye(len(keep), dtype=bool)
        return (kk[np.ix_(f, f)][off[np.ix_(f, f)]].mean() + kk[np.ix_(~f, ~f)][off[np.ix_(~f, ~f)]].mean()
                - 2 * kk[np.ix_(f, ~f)].mean())
    every = np.arange(len(z))
    assert stat.value == pytest.approx(mmd_u(every), rel=1e-12)
    brute = [mmd_u(np.delete(every, i)) for i in every]
    np.testing.assert_allclose(stat.loo_kernel, brute, rtol=1e-10)


def test_leave_one_out_values_follow_the_re_estimated_whitening_and_bandwidth():
    """``loo`` adds the first-order change of the whitening and of the median bandwidth: close to
    recomputing the whole statistic without each row, much closer than the kernel-only values."""
    x, y = _groups(5, n_f=40, n_r=160, d=12)
    stat = mmd_two_sample(x, y)
    keep = np.ones(len(x), bool)
    brute = []
    for i in stat.rows:
        keep[i] = False
        brute.append(mmd_two_sample(x[keep], y[keep]).value)
        keep[i] = True
    brute = np.array(brute)
    m = stat.n_forget
    assert np.corrcoef(stat.loo, brute)[0, 1] > 0.995
    assert np.corrcoef(stat.loo_kernel, brute)[0, 1] < np.corrcoef(stat.loo, brute)[0, 1]
    assert jackknife_cov(stat.loo, stat.loo, m) == pytest.approx(jackknife_cov(brute, brute, m), rel=0.05)


def test_far_apart_groups_are_flagged_and_the_interval_is_unbounded():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((150, 3))
    y = np.r_[np.ones(30, bool), np.zeros(120, bool)]
    x[y] += 1e3
    far = mmd_two_sample(x, y)
    assert far.saturated and "separable" in far.reason and far.separation > 0.99
    ordinary = mmd_two_sample(*_groups(7))
    assert not ordinary.saturated and ordinary.reason == ""
    r = ratio_interval(far, [mmd_two_sample(x + rng.standard_normal(x.shape), y)])
    assert (r.low, r.high, r.se_log) == (-math.inf, math.inf, math.inf)


@pytest.mark.parametrize("bad, words", [("constant", "constant"), ("nan", "non-finite"), ("wide", "kept dimensions")])
def test_degenerate_features_are_flagged(bad, words):
    rng = np.random.default_rng(8)
    y = np.r_[np.ones(10, bool), np.zeros(30, bool)]
    x = {"constant": np.ones((40, 5)), "wide": rng.standard_normal((40, 60))}.get(bad)
    if x is None:
        x = rng.standard_normal((40, 5))
        x[3, 2] = np.nan
    stat = mmd_two_sample(x, y)
    assert stat.saturated and words in stat.reason


def test_rows_are_capped_deterministically_and_shared():
    y = np.r_[np.ones(50, bool), np.zeros(400, bool)]
    rows = select_rows(y, max_rows=100, seed=3)
    assert len(rows) == 150 and y[rows[:50]].all() and not y[rows[50:]].any()
    np.testing.assert_array_equal(rows, select_rows(torch.from_numpy(y), max_rows=100, seed=3))
    rng = np.random.default_rng(9)
    x = rng.standard_normal((450, 6))
    a, b = mmd_two_sample(x, y, max_rows=100, seed=3), mmd_two_sample(torch.from_numpy(x), y, rows=rows)
    assert a.value == pytest.approx(b.value, rel=1e-12) and a.n_retain == 100
    with pytest.raises(ValueError, match="same rows"):
        ratio_interval(a, [mmd_two_sample(x, y, max_rows=100, seed=4)])


def test_identical_models_give_a_ratio_of_exactly_one():
    x, y = _groups(10)
    s = mmd_two_sample(x, y)
    r = ratio_interval(s, [s])
    assert r.ratio == 1.0 and r.low == pytest.approx(1.0, abs=1e-9) and r.high == pytest.approx(1.0, abs=1e-9)


def test_interval_covers_a_ratio_of_one():
    """Two models of the same images with the same population (ratio exactly 1), correlated noise: the
    95 % interval holds 1 in at least 85 % of 60 audits (the benchmark checks 93-97 % at full size)."""
    rng = np.random.default_rng(11)
    n_f, n_r, d = 40, 200, 10
    y = np.r_[np.ones(n_f, bool), np.zeros(n_r, bool)]
    covered = 0
    for _ in range(60):
        shared = rng.standard_normal((n_f + n_r, d))
        models = []
        for _ in range(2):
            x = 0.9 * shared + math.sqrt(1 - 0.81) * rng.standard_normal(shared.shape)
            x[:n_f, 0] += 1.2
            x[:n_f, 1:3] *= 1.5
            models.append(mmd_two_sample(x, y))
        r = ratio_interval(models[0], models[1:])
        covered += r.low <= 1.0 <= r.high
    assert covered >= 51, covered


def test_fieller_pivot_p_values_by_hand():
    """Fieller's pivot (a − ρb)/sqrt(va + ρ²vb − 2ρ cab) against a hand computation, and at a ratio at or
    below 0 (where a log-scale test has no value)."""
    from scipy import stats as st

    from unlearnkit.metrics.two_sample import RatioMoments, fieller_p

    mo = RatioMoments(a=2.0, b=1.0, va=0.04, vb=0.01, cab=0.005)
    up, down = fieller_p(mo, 1.0)
    z = (2.0 - 1.0) / math.sqrt(0.04 + 0.01 - 2 * 0.005)
    assert up == pytest.approx(st.norm.sf(z)) and down == pytest.approx(st.norm.cdf(z))
    assert fieller_p(mo, 2.0) == pytest.approx((0.5, 0.5))  # the true ratio: no evidence either way
    neg = RatioMoments(a=-0.001, b=1.0, va=1e-6, vb=0.01, cab=0.0)
    up, down = fieller_p(neg, 0.5)  # MMD² at 0 while the references' is 1: far below half of it
    assert up > 0.999 and down < 1e-6
