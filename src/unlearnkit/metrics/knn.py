"""Cosine k-nearest-neighbour accuracy of a feature bank (EC's k-NN metric).

Reference: Erase at the Core (reference-specs.md §2.7, protocol INFERRED: no code found):
bank = L2-normalised penultimate training features with labels, queries = test-retain or
test-forget features. The weighted vote is InstDisc's (Wu et al., CVPR 2018,
``lemniscate.pytorch: test.py::kNN``): class score Σ exp(sim / T) over the k neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_labels, features_2d

_CHUNK_ELEMS = 1 << 24  # ≈ 128 MiB of float64 similarities per query chunk


def _l2_normalize(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def knn_accuracy(
    bank_features: Any,
    bank_labels: Any,
    query_features: Any,
    query_labels: Any,
    *,
    k: int = 20,
    weighted: bool = False,
    temperature: float = 0.07,
) -> float:
    """Percent (0–100) of queries whose k-NN vote in the bank equals their label.

    Similarity = cosine (dot product of L2-normalised rows). ``weighted=False``: majority vote
    of the k most similar bank rows, ties between classes going to the smallest label (as
    scikit-learn's ``KNeighborsClassifier``). ``weighted=True``: InstDisc's vote, class score
    Σ_{neighbours of that class} exp(sim / ``temperature``); InstDisc uses k = 200, T = 0.07.
    A query is never excluded from the bank: pass disjoint sets (e.g. train bank, test queries).

    Returns ``nan`` for no queries; raises ValueError if k is not in [1, bank size].
    """
    bank = _l2_normalize(features_2d(bank_features, "bank_features"))
    query = _l2_normalize(features_2d(query_features, "query_features"))
    y_bank, y_query = as_labels(bank_labels, "bank_labels"), as_labels(query_labels, "query_labels")
    if bank.shape[0] != y_bank.shape[0] or query.shape[0] != y_query.shape[0]:
        raise ValueError("features and labels must have the same number of rows")
    if bank.shape[1] != query.shape[1]:
        raise ValueError(f"bank has {bank.shape[1]} features, queries have {query.shape[1]}")
    if not 1 <= k <= bank.shape[0]:
        raise ValueError(f"k must be in [1, {bank.shape[0]}] (the bank size), got {k}")
    if query.shape[0] == 0:
        return float("nan")
    classes, y_idx = np.unique(y_bank, return_inverse=True)  # sorted: argmax picks smallest label
    chunk = max(1, _CHUNK_ELEMS // bank.shape[0])
    correct = 0
    for start in range(0, query.shape[0], chunk):
        sim = query[start : start + chunk] @ bank.T
        top = np.argpartition(-sim, k - 1, axis=1)[:, :k]
        votes = np.zeros((sim.shape[0], classes.size))
        weights = np.exp(np.take_along_axis(sim, top, axis=1) / temperature) if weighted else 1.0
        np.add.at(votes, (np.arange(sim.shape[0])[:, None], y_idx[top]), weights)
        correct += int(np.sum(classes[votes.argmax(axis=1)] == y_query[start : start + chunk]))
    return float(100.0 * correct / query.shape[0])
