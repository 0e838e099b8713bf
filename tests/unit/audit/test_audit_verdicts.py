"""Each verdict is reachable, on a model constructed to deserve it (digits, small_cnn, class 3, five references)."""
from __future__ import annotations

import pytest
import torch
from audit_helpers import FAST, bn_masked, cached_audit, noised

from unlearnkit import UserError
from unlearnkit.audit import AuditConfig
from unlearnkit.audit.constructed import head_retrained

pytestmark = pytest.mark.heavy  # trains the audit references and runs whole audits: `make test`, not test-fast
FLAGS = ("suppressed", "overforgotten", "not_forgotten", "collapsed")


def test_a_genuine_held_out_retrain_is_never_flagged(rep_erased5):
    rep = rep_erased5
    assert rep.verdict in ("erased", "inconclusive"), rep.summary()
    assert not any(c.flag for c in rep.checks), [c.measure.label for c in rep.checks if c.flag]
    testable = [c for c in rep.checks if c.testable]
    assert {c.measure.family for c in testable} >= {"output", "relearning"}
    # relearning: a retrain gives back what retrains give back (kept fractions ~0.01 against the 0.1 margin)
    assert all(c.within for c in testable if c.measure.family == "relearning")
    assert rep.config.audit_seed == 11 and rep.to_dict()["audit_seed"] == 11
    if rep.verdict == "erased":
        assert any("certified" in e for e in rep.evidence) and rep.verdict_line == "erased"


def test_one_reference_never_certifies_erased(rep_erased):
    assert rep_erased.verdict == "inconclusive", rep_erased.summary()
    assert any("1 retrained reference" in e for e in rep_erased.evidence)
    assert rep_erased.references_needed == 5


def test_output_masked_original_is_suppressed(rep_suppressed):
    rep = rep_suppressed
    assert rep.verdict == "suppressed", rep.summary()
    assert rep.models["unlearned"]["outputs"]["forget_acc"] == 0.0  # the output forgets...
    pen = rep.layer("penultimate")
    assert pen.cka_original == pytest.approx(1.0, abs=1e-6)  # ...the representation is the original's
    rep_checks = [c for c in rep.checks if c.measure.family == "representation" and c.testable]
    assert rep_checks and all(c.result.kept == pytest.approx(1.0, abs=1e-6) for c in rep_checks)
    assert any(c.flag == "above" for c in rep.checks if c.measure.family in ("representation", "heads"))


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
    # cannot tell the two apart: the audit must say so and certify nothing
    rep = rep_tiny
    assert rep.verdict == "inconclusive", rep.summary()
    assert rep.sample_level and rep.audit_data["train"]["n_forget"] == 3 and "test" not in rep.audit_data
    assert any("only 3 forget samples" in e for e in rep.evidence)
    assert "relearning" in rep.resurfacing["not_applicable"]  # no forgotten class to relearn


def test_bn_frozen_style_forgetting_resurfaces(audit5, original, audit_split):
    rep = audit5("bn", bn_masked(original, audit_split), relearn=False, head_relearn=False)
    assert rep.models["unlearned"]["outputs"]["forget_acc"] < 5.0  # the output forgot...
    bn = [c for c in rep.checks if c.measure.family == "batchnorm"]
    assert bn and any(c.flag == "above" for c in bn)                 # ...until BN statistics are re-estimated
    # the stale statistics also leave the forget set's confidence above retrains' (a membership trace): the
    # output family reads it first
    assert rep.verdict in ("not_forgotten", "suppressed"), rep.summary()


def test_a_body_that_holds_the_class_is_caught(audit5, original, audit_split):
    """The original's body with a head retrained on the retained data: the output forgets, relearning of the
    whole model reads like a retrain's (the head never learnt the class), the representation and the head re-fit
    give it away."""
    rep = audit5("head-retrained", head_retrained(original, audit_split))
    assert rep.models["unlearned"]["outputs"]["forget_acc"] < 5.0
    assert rep.verdict == "suppressed", rep.summary()
    caught = {c.measure.family for c in rep.checks if c.flag == "above"}
    assert caught & {"representation", "heads"}


def test_references_that_are_not_references_are_refused(original, retrain0, retrain1, audit_split):
    from unlearnkit.audit import audit
    from unlearnkit.audit.constructed import masked_head as mask

    cfg = AuditConfig(**FAST)
    with pytest.raises(UserError, match="same weights as reference 1"):
        audit(original, retrain1, [retrain0, retrain0], audit_split, config=cfg)
    with pytest.raises(UserError, match="same weights as the original"):
        audit(original, retrain1, [retrain0, original], audit_split, config=cfg)
    with pytest.raises(UserError, match="same weights as the unlearned model"):
        audit(original, retrain1, [retrain0, retrain1], audit_split, config=cfg)
    with pytest.raises(UserError, match="predicts the forget set"):  # e.g. a retrain for another class
        audit(original, retrain1, [retrain0, mask(original, (5,))], audit_split, config=cfg)


def test_the_audit_seed_is_fresh_unless_given_and_repeats_when_given(original, retrain0, retrain1, audit_split):
    from unlearnkit.audit import audit

    cfg = dict(FAST, audit_seed=None, head_refit=True)
    seeds = {audit(original, retrain1, retrain0, audit_split, config=AuditConfig(**cfg)).config.audit_seed
             for _ in range(2)}
    assert len(seeds) == 2 and all(s is not None for s in seeds)
    fixed = [audit(original, retrain1, retrain0, audit_split, config=AuditConfig(**{**cfg, "audit_seed": 5}))
             for _ in range(2)]
    assert [c.to_dict() for c in fixed[0].checks] == [c.to_dict() for c in fixed[1].checks]
