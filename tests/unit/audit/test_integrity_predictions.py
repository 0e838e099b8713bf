"""`integrity.check_predictions`: a reference that predicts the forget set is refused; genuine seed-to-seed spread
is not (hand-computed cases)."""
from __future__ import annotations

import pytest

from unlearnkit.audit.integrity import check_predictions
from unlearnkit.errors import UserError


def test_a_reference_that_predicts_a_forgotten_class_is_refused():
    with pytest.raises(UserError, match="retrained reference 5 predicts the forget set"):
        check_predictions([0.0, 0.0, 0.0, 0.0, 98.0], 180, 10.0, 0.95)
    with pytest.raises(UserError, match="retrained reference 2 predicts"):  # one other: no spread to read
        check_predictions([0.0, 95.0], 180, 10.0, 0.95)


def test_retrains_that_spread_by_seed_are_all_accepted():
    """TARF's model_mismatch on digits: retrains' forget accuracies 28-42 %. For 42: the others' mean 28.5, sd
    6.61, t(0.95, 3) = 2.353, bound 28.5 + 2.353 x 6.61 x sqrt(1 + 1/4) = 45.9; 42 is not 10 points beyond it.
    The binomial test alone refused it (z = (0.42 - 0.285) / 0.0499 = 2.7, 13.5 points above the mean)."""
    check_predictions([20.0, 28.0, 30.0, 36.0, 42.0], 180, 10.0, 0.95)
    with pytest.raises(UserError, match="reference 5"):  # 10 points beyond the spread's bound: refused
        check_predictions([20.0, 28.0, 30.0, 36.0, 56.5], 180, 10.0, 0.95)


def test_random_rows_the_retrains_all_predict_are_accepted():
    check_predictions([97.5, 98.1, 97.8, 98.3, 99.4], 360, 10.0, 0.95)
