"""The references-derived tolerance (audit/tolerance.py): hand-computed values and the rule's properties."""
from __future__ import annotations

import math

import pytest

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.config import BUDGET
from unlearnkit.audit.tolerance import calibrated_for, separability_tolerance, simulate_false_flags
from unlearnkit.models.zoo import create_model

CFG = AuditConfig()


def test_three_references_by_hand():
    # log D² of three references 0, 0.1, 0.2: sample sd 0.1. Student t with 2 df has the closed form
    # t_p = (2p - 1) / sqrt(2p(1 - p)); the layers' 3/8 of 5 % over 8 comparisons: p = 1 - 0.01875/8 = 0.99765625
    # -> 0.9953125 / sqrt(0.0046765137) = 14.5545; tolerance = exp(14.5545 * 0.1 * sqrt(4/3)) = 5.3688
    tol = separability_tolerance([0.0, 0.1, 0.2], 8, False, None, CFG)
    assert tol.source == "references" and tol.k == 3
    assert tol.t == pytest.approx(14.5545, abs=1e-3)
    assert tol.value == pytest.approx(5.3688, abs=1e-3)


def test_the_tolerance_tightens_and_widens_with_the_references_and_keeps_its_floor():
    close = separability_tolerance([0.0, 0.02, 0.04, 0.01, 0.03], 8, False, None, CFG)
    apart = separability_tolerance([0.0, 0.2, 0.4, 0.1, 0.3], 8, False, None, CFG)
    assert close.derived < CFG.separability_floor == close.value  # floored
    assert close.derived < CFG.separability_margin < apart.value  # below and above the old constant
    more = separability_tolerance([0.0, 0.2, 0.4, 0.1, 0.3, 0.0, 0.2, 0.4, 0.1, 0.3], 8, False, None, CFG)
    assert more.value < apart.value  # same spread, more references: a smaller t multiplier
    two = separability_tolerance([0.0, 0.2, 0.4, 0.1, 0.3], 8, True, None, CFG)
    assert two.value > apart.value   # sample level: a deviation either way, half the level per side


def test_one_reference_uses_the_constant_and_says_whether_it_was_calibrated():
    small = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    wide = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8, width=64)
    mlp = create_model("mlp", num_classes=10, in_channels=1, image_size=8)
    assert calibrated_for(small, small) is not None
    assert calibrated_for(small, wide) is None and calibrated_for(mlp) is None
    import torch

    assert calibrated_for(torch.nn.Linear(2, 2)) is None  # a user's own module
    cal = separability_tolerance([0.3], 8, False, calibrated_for(small), CFG)
    unc = separability_tolerance([0.3], 8, False, None, CFG)
    assert cal.value == unc.value == CFG.separability_margin
    assert (cal.source, unc.source) == ("calibrated", "uncalibrated")
    assert "NOT validated" in unc.describe()


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_simulated_false_flag_rate_is_controlled(k, rho):
    # the layers' 3/8 of the 5 % budget (config.BUDGET) holds however the comparisons are correlated (Bonferroni)
    share = 0.05 * BUDGET["layers"]
    rate = simulate_false_flags(k, 8, rho, trials=4000, seed=1)
    assert rate <= share + 3 * math.sqrt(share * (1 - share) / 4000)
    # and the bound is not vacuous: independent comparisons use most of it
    if rho == 0.0:
        assert rate > share / 2.5


def test_head_relearning_margin_from_the_references_by_hand():
    from unlearnkit.audit.resurface import relearn_margin

    # retrained heads that agree (class 3: all at 0 %) keep the 20-point floor
    assert relearn_margin([0.0, 0.0, 0.0], CFG) == CFG.resurface_margin
    # digits class 6's retrains (14.3, 41.3, 25.4, 63.5 %): sd 21.35, t_{3, 0.99375} = 5.3919 (an eighth of
    # the 5 % budget), sqrt(1 + 1/4) = 1.1180 -> 128.7 points: wide enough that none of them would be flagged
    assert relearn_margin([14.3, 41.3, 25.4, 63.5], CFG) == pytest.approx(5.3919 * 21.35 * 1.1180, abs=0.1)
    # a check's own floor (the head re-fit's 35 points) stays when the references agree
    assert relearn_margin([0.0, 1.0, 0.0], CFG, "head_refit", floor=35.0) == 35.0
