"""The `not_forgotten` rule reads the references' own spread of forget accuracy (hand-computed cases)."""
from __future__ import annotations

import pytest

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.verdict import measurements, not_forgotten
from unlearnkit.metrics.equivalence import upper_prediction_bound


def _m(fu: float, refs: list[float], n: int = 131):
    return measurements(outputs_unlearned={"forget_acc": fu}, outputs_retrained={"forget_acc": sum(refs) / len(refs)},
                        checks=[], n_forget={}, sample_level=False, n_train_forget=n, n_refs=len(refs),
                        config=AuditConfig(), reference_forget_acc=refs)


def test_the_bound_by_hand():
    # mean 31.28, sd 10.97, t(0.95, 4) = 2.132: 31.28 + 2.132 x 10.97 x sqrt(1.2) = 56.9
    assert upper_prediction_bound([38.9, 19.8, 36.6, 19.1, 42.0], 0.95) == pytest.approx(56.9, abs=0.1)
    assert upper_prediction_bound([0.0, 0.0, 0.0], 0.95) == 0.0
    assert upper_prediction_bound([7.0], 0.95) == 7.0


def test_a_genuine_retrain_inside_the_references_spread_is_not_flagged():
    """TARF's model_mismatch on digits (seed 0): retrain 101 at 43.5 % against references at 19-42 % (mean 31.3)
    read not_forgotten (+12.2 points, z = 2.0) before the rule read their spread; 43.5 is below the bound 56.9."""
    assert not_forgotten(_m(43.5, [38.9, 19.8, 36.6, 19.1, 42.0])) is None
    flagged = not_forgotten(_m(67.0, [38.9, 19.8, 36.6, 19.1, 42.0]))  # 10.1 beyond the bound
    assert flagged is not None and "beyond the references' spread" in flagged.evidence[0]


def test_a_forgotten_class_is_judged_as_before():
    flagged = not_forgotten(_m(12.0, [0.0, 0.0, 0.0, 0.0, 0.0]))
    assert flagged is not None and flagged.verdict == "not_forgotten"
    assert "spread" not in flagged.evidence[0]  # the references do not spread: their mean is the bound
    assert not_forgotten(_m(9.0, [0.0, 0.0, 0.0, 0.0, 0.0])) is None  # within the 10-point margin
