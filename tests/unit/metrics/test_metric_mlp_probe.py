"""metrics/mlp_probe.py: the held-out MLP probe. What holds on any CPU: one number per probe seed, repeatable, a class
that is easy to find reads a far lower loss than one that is not there, and no rescaling or permutation of the
units moves it. Its agreement with scikit-learn's probe on real models is ``benchmarks/mlp_probe_cost.py``'s
measurement (``benchmarks/results/mlp_probe_cost.json``)."""
from __future__ import annotations

import numpy as np
import pytest
from bench_modules import benchmark_module

from unlearnkit.metrics.mlp_probe import heldout_log_loss


def _data(shift: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(600, 6)), np.zeros(600)
    y[:100] = 1
    x[:100, 0] += shift
    return x, y


BASE = -(1 / 6 * np.log(1 / 6) + 5 / 6 * np.log(5 / 6))  # the loss of predicting the base rate: 0.451


def test_one_loss_per_seed_repeatable_and_lower_where_the_class_is_found():
    found, absent = _data(4.0), _data(0.0)
    a = heldout_log_loss(*found, [11, 12])
    assert len(a) == 2 and a == heldout_log_loss(*found, [11, 12])
    assert a[0] != a[1]  # each seed its own folds and start
    null = heldout_log_loss(*absent, [11])[0]
    assert max(a) < 0.3 * BASE < 0.8 * BASE < null  # measured here: 0.07 against 0.45


def test_rescaled_and_permuted_units_read_the_same_losses():
    """Powers of two up to 2**±100 on every unit, a permutation, and a dead unit at any scale: bit-identical."""
    x, y = _data(1.5)
    x = np.concatenate([x, np.full((600, 1), 3.0)], axis=1)  # a dead unit
    rng = np.random.default_rng(1)
    scale = 2.0 ** rng.choice([-100, -24, 0, 24, 100], size=x.shape[1])
    perm = rng.permutation(x.shape[1])
    assert heldout_log_loss(x[:, perm] * scale[perm], y, [5, 6]) == heldout_log_loss(x, y, [5, 6])


def test_no_live_unit_reads_the_base_rate_and_too_few_rows_are_refused():
    _, y = _data(0.0)
    assert heldout_log_loss(np.ones((600, 3)), y, [1]) == [pytest.approx(BASE)]
    with pytest.raises(ValueError, match="at least 5 rows of each class"):
        heldout_log_loss(np.zeros((20, 2)), np.r_[np.ones(4), np.zeros(16)], [1])


def test_the_benchmarks_probe_is_this_one():
    x, y = _data(2.0)
    assert benchmark_module("mlp_probe").probe_batched(x, y, [3]) == heldout_log_loss(x, y, [3])
