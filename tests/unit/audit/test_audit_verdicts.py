"""Each verdict is reachable, on a model constructed to deserve it (digits, small_cnn, class 3)."""
from __future__ import annotations

import pytest
import torch
from audit_helpers import FAST, bn_masked, cached_audit, masked_head, noised

from unlearnkit.audit import AuditConfig


def test_retrain_of_another_seed_is_erased(rep_erased):
    assert rep_erased.verdict == "erased", rep_erased.summary()
    # every layer within tolerance on the data the verdict rests on
    for r in rep_erased.layers[rep_erased.rests_on]:
        assert r.delta_lpr.low <= r.lpr_margin
        assert r.separability_ratio.low <= r.separability_margin
    assert any("within tolerance" in e for e in rep_erased.evidence)


def test_output_masked_original_is_suppressed_never_erased(rep_suppressed):
    assert rep_suppressed.verdict == "suppressed", rep_suppressed.summary()
    out = rep_suppressed.models["unlearned"]["outputs"]
    assert out["forget_acc"] == 0.0  # the output forgets...
    pen = rep_suppressed.layer("penultimate")
    assert pen.cka_original == pytest.approx(1.0, abs=1e-6)  # ...the representation is the original's
    assert pen.separability_ratio.low > pen.separability_margin
    assert any("still separates the forgotten class" in e and "CKA to original 1.000" in e
               for e in rep_suppressed.evidence)


def test_masked_original_is_suppressed_on_the_test_data_too(original, retrain0, audit_split, report_cache):
    # the test set holds only 37 forgotten digits; the verdict must not flip when it rests on them
    cfg = AuditConfig(audit_data="test", n_splits=10, bn_recalibration=False, relearn=False)
    rep = cached_audit(report_cache, "suppressed-test", original, masked_head(original), retrain0,
                       audit_split, config=cfg)
    assert rep.rests_on == "test"
    assert rep.verdict == "suppressed", rep.summary()


def test_original_itself_is_not_forgotten(original, retrain0, audit_split, report_cache):
    rep = cached_audit(report_cache, "original", original, original, retrain0, audit_split,
                       config=AuditConfig(**FAST))
    assert rep.verdict == "not_forgotten"
    assert "forget accuracy 100.0%" in rep.evidence[0]


@pytest.mark.parametrize("kind", ["noised", "reinit"])
def test_destroyed_models_are_collapsed(kind, original, retrain0, audit_split, report_cache):
    from unlearnkit.models.zoo import create_model

    if kind == "noised":
        model = noised(original, 1.0)
    else:
        torch.manual_seed(123)
        model = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    rep = cached_audit(report_cache, kind, original, model, retrain0, audit_split, config=AuditConfig(**FAST))
    assert rep.verdict == "collapsed", rep.summary()
    assert any("below retrain's" in e for e in rep.evidence)


def test_three_forgotten_indices_are_inconclusive(rep_tiny):
    # the original memorised these 3 samples and the retrained model never saw them, yet 3 samples
    # cannot tell the two apart at 95 %: the audit must say so and certify nothing
    rep = rep_tiny
    assert rep.verdict == "inconclusive", rep.summary()
    assert rep.rests_on == "train" and rep.sample_level
    assert rep.audit_data["train"]["n_forget"] == 3 and "test" not in rep.audit_data
    assert rep.n_forget_needed is not None and rep.n_forget_needed >= AuditConfig().min_forget
    assert any("would be needed" in e for e in rep.evidence)
    assert not rep.resurfacing["relearn"].applicable  # no forgotten class to relearn


def test_several_references_set_the_margin_and_still_certify_a_retrain(original, retrain0, retrain1, retrain2,
                                                                       audit_split, report_cache):
    rep = cached_audit(report_cache, "multi", original, retrain2, [retrain0, retrain1], audit_split,
                       config=AuditConfig(n_splits=10, bn_recalibration=False, relearn=False))
    assert rep.verdict == "erased", rep.summary()
    defaults = AuditConfig()
    for r in rep.layers[rep.rests_on]:
        assert "2 retrained references" in r.margin_source
        assert r.ref_spread_lpr is not None and r.ref_spread_separability is not None
        # the spread can widen a tolerance, never narrow it below the default
        assert r.lpr_margin >= min(defaults.lpr_margin, defaults.shallow_lpr_margin)
        assert r.lpr_margin >= defaults.spread_factor * r.ref_spread_lpr - 1e-9
    assert rep.models["retrained"]["n"] == 2


def test_several_references_still_catch_the_masked_original(original, retrain0, retrain1, audit_split,
                                                           report_cache):
    rep = cached_audit(report_cache, "multi-masked", original, masked_head(original), [retrain0, retrain1],
                       audit_split, config=AuditConfig(**FAST))
    assert rep.verdict == "suppressed", rep.summary()


def test_bn_frozen_style_forgetting_resurfaces(original, retrain0, audit_split, report_cache):
    model = bn_masked(original, audit_split)
    rep = cached_audit(report_cache, "bn", original, model, retrain0, audit_split,
                       config=AuditConfig(n_splits=5, relearn=False))
    bn = rep.resurfacing["bn_recalibration"]
    assert rep.models["unlearned"]["outputs"]["forget_acc"] < 5.0  # the output forgot...
    assert bn.resurfaced and bn.forget_acc_after > 90.0            # ...until BN statistics are re-estimated
    assert bn.retrain_forget_acc_after < 10.0
    assert rep.verdict == "suppressed"
    assert any("re-estimating BatchNorm statistics" in e for e in rep.evidence)


def test_relearning_flags_weight_level_suppression(original, retrain0, audit_split, report_cache):
    # a soft output mask (bias -10) is undone by a few SGD steps; a retrained model is not
    model = masked_head(original, bias=-10.0)
    rep = cached_audit(report_cache, "soft", original, model, retrain0, audit_split,
                       config=AuditConfig(n_splits=5, bn_recalibration=False))
    rl = rep.resurfacing["relearn"]
    assert rl.applicable and rl.resurfaced, rl
    assert rl.retrain_forget_acc_after < 10.0
    assert rep.verdict == "suppressed"


def test_resurfacing_checks_leave_a_retrain_alone(rep_erased):
    for name in ("bn_recalibration", "relearn"):
        r = rep_erased.resurfacing[name]
        assert r.applicable and not r.resurfaced
        assert abs(r.excess) < AuditConfig().resurface_margin
