import math

import numpy as np
import pytest
import torch

from unlearnkit.metrics import fisher_separability


def _reference(ff, fr):
    mu = ff.mean(0) - fr.mean(0)
    return float(np.dot(mu, mu) / (np.trace(np.cov(ff.T)) + np.trace(np.cov(fr.T)) + 1e-10))


def test_hand_computed_one_dimensional():
    x = np.array([0.0, 2.0, 4.0, 6.0])
    f = np.array([True, True, False, False])
    # means 1 and 5, variances (ddof=1) 2 and 2: 16 / 4
    assert fisher_separability(x, f) == pytest.approx(4.0)


def test_matches_trace_of_np_cov():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 8))
    f = rng.random(300) < 0.2
    x[f] += 0.7
    assert fisher_separability(x, f) == pytest.approx(_reference(x[f], x[~f]), rel=1e-12)
    from_torch = fisher_separability(torch.from_numpy(x), torch.from_numpy(f))
    assert from_torch == pytest.approx(_reference(x[f], x[~f]))


def test_d_greater_than_n_uses_trace_unless_mirage_compat():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 50))
    f = np.zeros(200, dtype=bool)
    f[:20] = True  # 20 forget rows < d = 50
    ff, fr = x[f], x[~f]
    assert fisher_separability(x, f) == pytest.approx(_reference(ff, fr))
    mu = ff.mean(0) - fr.mean(0)
    mirage = float(mu @ mu / (np.var(ff) + np.trace(np.cov(fr.T)) + 1e-10))  # mirage_lib.py branch
    assert fisher_separability(x, f, mirage_compat=True) == pytest.approx(mirage)
    # np.var shrinks the forget side's Tr Σ about d-fold, inflating F
    assert fisher_separability(x, f, mirage_compat=True) > 1.5 * fisher_separability(x, f)
    big = rng.normal(size=(400, 5))
    mask = np.arange(400) < 60
    assert fisher_separability(big, mask, mirage_compat=True) == pytest.approx(fisher_separability(big, mask))


def test_balanced_draws_forget_sized_retain_subset():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(500, 4))
    f = np.arange(500) < 50
    x[f] += 1.0
    pick = np.sort(np.random.default_rng(5).choice(450, 50, replace=False))
    got = fisher_separability(x, f, balanced=True, seed=5)
    assert got == pytest.approx(_reference(x[f], x[~f][pick]))
    assert got != fisher_separability(x, f, balanced=True, seed=6)


def test_too_few_rows():
    x = np.random.default_rng(0).normal(size=(10, 3))
    f = np.arange(10) < 1
    assert math.isnan(fisher_separability(x, f))
    assert fisher_separability(x, f, mirage_compat=True) == 0.0
