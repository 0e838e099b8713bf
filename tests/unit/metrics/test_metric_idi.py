"""IDI's pure parts, against hand-computed cases (Jeon et al., reference-specs §2.6)."""
import math

import numpy as np
import pytest
import torch

from unlearnkit.metrics.idi import LOG2, idi, infonce_mi, information_difference


def test_infonce_mi_by_hand():
    # sample 1: scores (2, 0), label 0 -> CE = log(1 + e^-2); sample 2: scores (0, 0), label 1 -> CE = log 2
    s = np.array([[2.0, 0.0], [0.0, 0.0]])
    ce = (math.log(1 + math.exp(-2.0)) + math.log(2.0)) / 2
    assert infonce_mi(s, np.array([0, 1])) == pytest.approx(LOG2 - ce)
    assert infonce_mi(torch.tensor(s), torch.tensor([0, 1])) == pytest.approx(LOG2 - ce)


def test_infonce_mi_bounds():
    y = np.array([0, 1] * 50)
    perfect = np.where(y[:, None] == np.arange(2)[None, :], 30.0, -30.0)
    assert infonce_mi(perfect, y) == pytest.approx(LOG2, abs=1e-12)
    assert infonce_mi(np.zeros((100, 2)), y) == pytest.approx(0.0, abs=1e-12)
    assert infonce_mi(-perfect, y) < 0  # a critic that is confidently wrong: the bound goes negative
    with pytest.raises(ValueError):
        infonce_mi(np.zeros((3, 3)), np.zeros(3))


def test_idi_formula_signed_and_clipped():
    mi_u, mi_o, mi_r = [0.5, 0.3, 0.2], [0.6, 0.6, 0.6], [0.4, 0.4, 0.4]
    # signed: ID_u = 0.1 - 0.1 - 0.2 = -0.2 ; ID_o = 0.6 -> IDI = -1/3
    assert information_difference(mi_u, mi_r) == pytest.approx(-0.2)
    assert idi(mi_u, mi_o, mi_r) == pytest.approx(-0.2 / 0.6)
    # clipped per layer: ID_u = 0.1 -> IDI = 1/6
    assert idi(mi_u, mi_o, mi_r, clip=True) == pytest.approx(0.1 / 0.6)
    assert idi(mi_o, mi_o, mi_r) == pytest.approx(1.0)
    assert idi(mi_r, mi_o, mi_r) == pytest.approx(0.0)
    assert math.isnan(idi(mi_u, mi_r, mi_r))  # the original carries no extra information: undefined
    with pytest.raises(ValueError):
        information_difference([0.1], [0.1, 0.2])
