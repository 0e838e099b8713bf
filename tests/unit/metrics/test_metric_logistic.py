"""The batched resplit logistic solver against sklearn (the Mirage probe's reference)."""
import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score, roc_auc_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from unlearnkit.metrics.logistic import balanced_accuracy_auroc, fit_logistic_resplits


def _problem(n=400, d=12, seed=0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.2).astype(np.int64)
    x = rng.normal(size=(n, d))
    x[y == 1, :3] += 0.9
    x[:, 4] *= 40.0           # badly scaled column: the per-split StandardScaler matters
    x[:, 5] = 3.0             # constant column: sklearn's zero-variance rule (scale 1)
    splits = [train_test_split(np.arange(n), test_size=0.3, random_state=42 + i, stratify=y) for i in range(6)]
    train = np.zeros((n, len(splits)), bool)
    for j, (tr, _) in enumerate(splits):
        train[tr, j] = True
    return x, y, splits, train


@pytest.mark.parametrize("C", [1.0, 0.05])
def test_matches_sklearn_at_tight_tolerance(C):
    x, y, splits, train = _problem()
    fits = fit_logistic_resplits(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(train), C=C,
                                 tol=1e-9, max_iter=5000)
    assert bool(fits.converged.all())
    bacc, auroc = balanced_accuracy_auroc(fits.decision, torch.from_numpy(y), torch.from_numpy(~train))
    for j, (tr, te) in enumerate(splits):
        sc = StandardScaler().fit(x[tr])
        clf = LogisticRegression(C=C, tol=1e-12, max_iter=10000).fit(sc.transform(x[tr]), y[tr])
        np.testing.assert_allclose(fits.coef[j].numpy(), clf.coef_[0], rtol=1e-5, atol=1e-6)
        assert float(fits.intercept[j]) == pytest.approx(clf.intercept_[0], abs=1e-6)
        np.testing.assert_allclose(fits.mean[j].numpy(), sc.mean_)
        np.testing.assert_allclose(fits.decision[te, j].numpy(), clf.decision_function(sc.transform(x[te])),
                                   atol=1e-5)
        assert float(bacc[j]) == pytest.approx(100 * balanced_accuracy_score(y[te], clf.predict(sc.transform(x[te]))))
        assert float(auroc[j]) == pytest.approx(roc_auc_score(y[te], clf.decision_function(sc.transform(x[te]))))


def test_default_tolerance_is_sklearns_stopping_rule():
    """At tol 1e-4 (sklearn's default) both stop near the same optimum: scores agree closely."""
    x, y, splits, train = _problem(n=600, seed=1)
    fits = fit_logistic_resplits(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(train), tol=1e-4)
    bacc, _ = balanced_accuracy_auroc(fits.decision, torch.from_numpy(y), torch.from_numpy(~train))
    ref = []
    for tr, te in splits:
        sc = StandardScaler().fit(x[tr])
        clf = LogisticRegression(C=1.0, max_iter=1000).fit(sc.transform(x[tr]), y[tr])
        ref.append(100 * balanced_accuracy_score(y[te], clf.predict(sc.transform(x[te]))))
    assert abs(float(bacc.mean()) - np.mean(ref)) < 0.5


def test_auroc_with_ties_and_balanced_accuracy_by_hand():
    # 3 positives, 3 negatives; decisions with a tie across the classes
    d = torch.tensor([[2.0], [0.5], [-1.0], [0.5], [-2.0], [-0.1]], dtype=torch.float64)
    y = torch.tensor([1, 1, 1, 0, 0, 0])
    test = torch.ones(6, 1, dtype=torch.bool)
    bacc, auroc = balanced_accuracy_auroc(d, y, test)
    # predicted positive: rows 0, 1, 3 -> recall(1) = 2/3, recall(0) = 2/3
    assert float(bacc[0]) == pytest.approx(100 * 2 / 3)
    assert float(auroc[0]) == pytest.approx(roc_auc_score(y.numpy(), d[:, 0].numpy()))


def test_separable_data_stays_finite():
    """Regularisation keeps the optimum finite even when the classes are perfectly separable."""
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(40, np.int64), np.zeros(160, np.int64)]
    x = rng.normal(size=(200, 5))
    x[y == 1, 0] += 25.0
    train = np.ones((200, 2), bool)
    train[::3, 1] = False
    fits = fit_logistic_resplits(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(train))
    assert torch.isfinite(fits.coef).all() and bool(fits.converged.all())
    bacc, auroc = balanced_accuracy_auroc(fits.decision, torch.from_numpy(y), torch.ones(200, 2, dtype=torch.bool))
    assert float(bacc.min()) == 100.0 and float(auroc.min()) == 1.0
