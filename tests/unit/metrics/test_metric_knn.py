import math

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier

from unlearnkit.metrics import knn, knn_accuracy


def _bank(seed=0, n_bank=300, n_query=120, d=8, k_cls=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k_cls, d))
    yb, yq = rng.integers(0, k_cls, n_bank), rng.integers(0, k_cls, n_query)
    xb = centers[yb] + 1.2 * rng.normal(size=(n_bank, d))
    xq = centers[yq] + 1.2 * rng.normal(size=(n_query, d))
    return xb, yb, xq, yq


@pytest.mark.parametrize("k", [1, 5, 20])
def test_majority_matches_sklearn_cosine(k):
    xb, yb, xq, yq = _bank()
    clf = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute").fit(xb, yb)
    expected = 100 * clf.score(xq, yq)
    assert 0 < expected < 100
    assert knn_accuracy(xb, yb, xq, yq, k=k) == pytest.approx(expected)


def _instdisc(xb, yb, xq, yq, k, t, n_cls):
    """lemniscate.pytorch test.py::kNN: topk similarities, exp(sim / T) summed per class."""
    b = torch.nn.functional.normalize(torch.from_numpy(xb), dim=1)
    q = torch.nn.functional.normalize(torch.from_numpy(xq), dim=1)
    yd, yi = (q @ b.T).topk(k, dim=1)
    one_hot = torch.zeros(q.shape[0] * k, n_cls, dtype=torch.float64)
    one_hot.scatter_(1, torch.from_numpy(yb)[yi].view(-1, 1), 1)
    probs = (one_hot.view(q.shape[0], k, n_cls) * yd.div(t).exp().unsqueeze(-1)).sum(1)
    return 100 * float((probs.argmax(1).numpy() == yq).mean())


def test_weighted_matches_instdisc():
    xb, yb, xq, yq = _bank(seed=1)
    for k in (10, 200):
        expected = _instdisc(xb, yb, xq, yq, k, 0.07, 4)
        assert knn_accuracy(xb, yb, xq, yq, k=k, weighted=True) == pytest.approx(expected)


def test_hand_case_and_tie_goes_to_smallest_label():
    bank = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = np.array([0, 0, 1, 1])
    query = np.array([[5.0, 0.2], [0.3, 4.0]])  # scale-free: cosine
    assert knn_accuracy(bank, labels, query, np.array([0, 1]), k=1) == 100.0
    assert knn_accuracy(bank, labels, query, np.array([0, 1]), k=4) == 50.0  # 2-2 tie -> class 0 for both


def test_chunking_gives_same_result(monkeypatch):
    xb, yb, xq, yq = _bank(seed=2)
    full = knn_accuracy(xb, yb, xq, yq, k=7, weighted=True)
    monkeypatch.setattr(knn, "_CHUNK_ELEMS", 1000)  # 3 queries per chunk
    assert knn_accuracy(xb, yb, xq, yq, k=7, weighted=True) == full


def test_bad_k_and_empty():
    xb, yb, xq, yq = _bank()
    with pytest.raises(ValueError, match="k must be"):
        knn_accuracy(xb, yb, xq, yq, k=301)
    assert math.isnan(knn_accuracy(xb, yb, xq[:0], yq[:0]))
