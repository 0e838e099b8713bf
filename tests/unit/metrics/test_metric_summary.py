import pytest
from scipy.stats import hmean

from unlearnkit.metrics import gap, h_mean

SCRUB = {"ua": 95.14, "ra": 99.81, "ta": 94.22, "mia": 15.38}
RETRAIN = {"ua": 87.76, "ra": 99.58, "ta": 95.91, "mia": 20.57}


def test_gap_tarf_scrub_row():
    # |diffs| = 7.38, 0.23, 1.69, 5.19 -> 14.49 / 4 = 3.6225 (reference-specs.md §2.8 rounds to 3.62)
    assert gap(SCRUB, RETRAIN) == pytest.approx(3.6225, abs=1e-9)
    assert gap(SCRUB, RETRAIN) != pytest.approx(2.60, abs=0.05)  # the paper's printed value is wrong


def test_gap_custom_keys_and_missing_key():
    assert gap({"a": 1.0, "b": 5.0}, {"a": 3.0, "b": 5.0}, keys=("a", "b")) == pytest.approx(1.0)
    with pytest.raises(KeyError, match="mia"):
        gap({"ua": 1, "ra": 1, "ta": 1}, RETRAIN)


def test_h_mean_hand_cases_and_scipy():
    assert h_mean(10.0, 90.0) == pytest.approx(90.0)
    assert h_mean(50.0, 100.0) == pytest.approx(2 * 50 * 100 / 150)
    assert h_mean(37.5, 81.0) == pytest.approx(hmean([100 - 37.5, 81.0]))
    assert h_mean(100.0, 0.0) == 0.0
    assert h_mean(100.0, 80.0) == 0.0  # nothing forgotten-quality-wise: A = 0
