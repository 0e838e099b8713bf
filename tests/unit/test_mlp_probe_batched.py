"""``benchmarks/mlp_probe.py``'s ``probe_batched``: the ground truth's MLP probe with its fits trained together.

Its agreement with the scikit-learn probe on real models (Pearson r of the log losses over 16 digits models, the
keepers' ranks) is ``benchmarks/mlp_probe_cost.py``'s measurement (``benchmarks/results/mlp_probe_cost.json``); here
what holds on any CPU: one number per probe seed, repeatable, and a class that is easy to find reads a far lower loss
than one that is not there.
"""
from __future__ import annotations

import numpy as np
import pytest
from bench_modules import benchmark_module


@pytest.fixture(scope="module")
def mlp():
    return benchmark_module("mlp_probe")


def _data(shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(600, 6)), np.zeros(600)
    y[:100] = 1
    x[:100, 0] += shift
    return x, y


def test_one_loss_per_seed_repeatable_and_lower_where_the_class_is_found(mlp):
    found, absent = _data(4.0), _data(0.0)
    a = mlp.probe_batched(*found, [11, 12])
    assert len(a) == 2 and a == mlp.probe_batched(*found, [11, 12])
    assert a[0] != a[1]  # each seed its own folds and start
    base = -(1 / 6 * np.log(1 / 6) + 5 / 6 * np.log(5 / 6))  # the loss of predicting the base rate: 0.451
    null = mlp.probe_batched(*absent, [11])[0]
    assert max(a) < 0.3 * base < 0.8 * base < null  # measured here: 0.07 against 0.45
