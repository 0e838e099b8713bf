import math

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score

from unlearnkit.metrics import accuracy


def test_hand_computed_logits_and_preds():
    logits = np.array([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]])
    labels = np.array([0, 1, 1])
    assert accuracy(logits, labels) == pytest.approx(200.0 / 3.0)
    assert accuracy(np.array([0, 1, 0]), labels) == pytest.approx(200.0 / 3.0)
    assert accuracy(np.array([0, 1, 1]), labels) == 100.0


def test_matches_sklearn_on_random_logits():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 7))
    labels = rng.integers(0, 7, size=500)
    expected = 100.0 * accuracy_score(labels, logits.argmax(axis=1))
    assert accuracy(logits, labels) == pytest.approx(expected)


def test_torch_inputs_match_numpy():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(64, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=64)
    got = accuracy(torch.from_numpy(logits).to(torch.bfloat16).float(), torch.from_numpy(labels))
    want = 100.0 * np.mean(torch.from_numpy(logits).argmax(1).numpy() == labels)
    assert got == pytest.approx(want)


def test_empty_is_nan_and_mismatch_raises():
    assert math.isnan(accuracy(np.zeros((0, 3)), np.zeros(0, dtype=int)))
    assert math.isnan(accuracy(np.zeros(0, dtype=int), np.zeros(0, dtype=int)))
    with pytest.raises(ValueError, match="predictions"):
        accuracy(np.zeros((3, 2)), np.zeros(2, dtype=int))
