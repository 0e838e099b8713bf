import numpy as np
import pytest
from joblib import parallel_config
from scipy import stats
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from unlearnkit.metrics import DeltaLPR, linear_probe_recovery, paired_delta_lpr, sample_level_subsample


def _data(n=300, d=10, shift=0.5, frac=0.2, seed=0):
    rng = np.random.default_rng(seed)
    is_forget = rng.random(n) < frac
    x = rng.normal(size=(n, d))
    x[is_forget, 0] += shift
    return x, is_forget


def _mirage_reference(features, b, seed=42):
    """mirage_lib.py::linear_probe_recovery re-written: arrays split directly, balanced accuracy by hand."""
    xtr, xte, ytr, yte = train_test_split(features, b, test_size=0.3, random_state=seed, stratify=b)
    sc = StandardScaler().fit(xtr)
    clf = LogisticRegression(C=1.0, max_iter=1000, solver="lbfgs", random_state=seed)
    clf.fit(sc.transform(xtr), ytr)
    pred = clf.predict(sc.transform(xte))
    recalls = [np.mean(pred[yte == c] == c) for c in (0, 1)]
    return 100 * np.mean(recalls), roc_auc_score(yte, clf.predict_proba(sc.transform(xte))[:, 1])


@pytest.mark.parametrize("seed", [42, 7])
def test_lpr_matches_mirage_protocol(seed):
    x, f = _data(shift=0.8)
    bacc, auc = _mirage_reference(x, f.astype(int), seed)
    res = linear_probe_recovery(x, f, seed=seed)
    assert res.balanced_accuracy == pytest.approx(bacc)
    assert res.auroc == pytest.approx(auc)
    assert (res.n_forget, res.n_retain) == (int(f.sum()), int((~f).sum()))


def test_lpr_separable_vs_noise():
    x, f = _data(shift=6.0)
    sep = linear_probe_recovery(x, f)
    assert sep.balanced_accuracy > 95 and sep.auroc > 0.99
    noise = linear_probe_recovery(*_data(n=600, shift=0.0))
    assert 30 < noise.balanced_accuracy < 70


def test_lpr_nan_features_become_zero():
    x, f = _data(shift=1.0)
    bad = x.copy()
    bad[::7, 3] = np.nan
    bad[::11, 5] = np.inf
    clean = x.copy()
    clean[::7, 3] = 0.0
    clean[::11, 5] = 0.0
    assert linear_probe_recovery(bad, f) == linear_probe_recovery(clean, f)


def test_lpr_mlp_probe_learns_nonlinear_boundary():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 2))
    f = (x[:, 0] ** 2 + x[:, 1] ** 2) < 1.4  # a disk holding ~half the points: not linearly separable
    assert linear_probe_recovery(x, f, probe="mlp").balanced_accuracy > 85
    assert linear_probe_recovery(x, f, probe="linear").balanced_accuracy < 70


def test_lpr_too_few_per_class_raises():
    x = np.random.default_rng(0).normal(size=(20, 3))
    f = np.zeros(20, dtype=bool)
    f[0] = True
    with pytest.raises(ValueError, match="at least 2 forget"):
        linear_probe_recovery(x, f)
    with pytest.raises(ValueError, match="probe must be"):
        linear_probe_recovery(x, np.arange(20) < 10, probe="svm")


def test_sample_level_subsample_reproduces_mirage_draw():
    rng = np.random.default_rng(0)
    f = rng.random(400) < 0.1
    idx = sample_level_subsample(f, max_per_side=2500, seed=42)
    # mirage_lib.py::sample_level_lpr on index lists
    ref_rng = np.random.RandomState(42)
    forget_list, retain_list = [i for i in range(400) if f[i]], [i for i in range(400) if not f[i]]
    n_per = min(5000 // 2, len(forget_list), len(retain_list))
    ref = (
        ref_rng.choice(forget_list, n_per, replace=False).tolist()
        + ref_rng.choice(retain_list, n_per, replace=False).tolist()
    )
    assert idx.tolist() == ref
    assert f[idx[:n_per]].all() and not f[idx[n_per:]].any() and len(set(idx.tolist())) == 2 * n_per
    assert len(sample_level_subsample(f, max_per_side=5, seed=1)) == 10


def test_paired_delta_first_split_equals_single_lpr_and_means():
    xu, f = _data(shift=2.0, seed=1)
    xr, _ = _data(shift=0.0, seed=2)
    res = paired_delta_lpr(xu, xr, f, n_splits=4, seed=42)
    assert isinstance(res, DeltaLPR)
    lpr_u0 = linear_probe_recovery(xu, f, seed=42).balanced_accuracy
    assert res.per_split_unlearned[0] == pytest.approx(lpr_u0)
    lpr_r3 = linear_probe_recovery(xr, f, seed=45).balanced_accuracy
    assert res.per_split_retrained[3] == pytest.approx(lpr_r3)
    assert res.delta == pytest.approx(np.mean(res.per_split_unlearned - res.per_split_retrained))
    assert res.lpr_unlearned - res.lpr_retrained == pytest.approx(res.delta)
    assert res.delta > 20 and res.ci_low > 0


def test_paired_delta_ci_methods_against_scipy():
    xu, f = _data(shift=0.7, seed=3)
    xr, _ = _data(shift=0.4, seed=4)
    j = 6
    d = paired_delta_lpr(xu, xr, f, n_splits=j, ci_method="t").per_split_delta
    sd = np.std(d, ddof=1)
    t_int = stats.t.interval(0.9, j - 1, loc=d.mean(), scale=sd / np.sqrt(j))
    res_t = paired_delta_lpr(xu, xr, f, n_splits=j, confidence=0.9, ci_method="t")
    assert (res_t.ci_low, res_t.ci_high) == pytest.approx(t_int)
    n_test = int(np.ceil(0.3 * len(f)))
    nb_scale = sd * np.sqrt(1 / j + n_test / (len(f) - n_test))  # Nadeau & Bengio (2003)
    res_c = paired_delta_lpr(xu, xr, f, n_splits=j, confidence=0.9)
    nb_int = stats.t.interval(0.9, j - 1, loc=d.mean(), scale=nb_scale)
    assert (res_c.ci_low, res_c.ci_high) == pytest.approx(nb_int)
    assert res_c.ci_high - res_c.ci_low > res_t.ci_high - res_t.ci_low
    res_p = paired_delta_lpr(xu, xr, f, n_splits=j, confidence=0.9, ci_method="percentile")
    assert (res_p.ci_low, res_p.ci_high) == pytest.approx(tuple(np.quantile(d, [0.05, 0.95])))


def test_paired_delta_identical_features_is_zero_and_parallel_is_same():
    x, f = _data(shift=1.0)
    res = paired_delta_lpr(x, x, f, n_splits=3)
    assert res.delta == 0.0 and res.ci_low == 0.0 and res.ci_high == 0.0
    xr, _ = _data(shift=0.0, seed=5)
    a = paired_delta_lpr(x, xr, f, n_splits=3)
    with parallel_config(backend="threading"):  # the parallel path without loky's start-up cost
        b = paired_delta_lpr(x, xr, f, n_splits=3, n_jobs=2)
    np.testing.assert_array_equal(a.per_split_delta, b.per_split_delta)
