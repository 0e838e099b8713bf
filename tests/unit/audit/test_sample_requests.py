"""Sample requests (issue 43): the per-example membership statistic, the relearning of the forget rows' own
labels, and the audit on digits with 5 % flipped labels (the original memorised them)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from audit_helpers import cached_audit, single_thread

from unlearnkit.audit.outputs import LIRA_VARIANCE_FLOOR, membership

FLIPPED = 0.05


def test_membership_by_hand_pooled_and_per_example():
    others = np.array([[0.0, 0.0], [2.0, 4.0]])  # μ = (1, 2), per-example variances (ddof 1) (2, 8), pooled 5
    v = np.array([1.0 + math.sqrt(5.0), 2.0])
    assert membership(v, others, per_example=False) == pytest.approx(math.sqrt(0.5))  # z = (1, 0)
    # per example: z = (√5 / √2, 0), RMS √(5/4)
    assert membership(v, others, per_example=True) == pytest.approx(math.sqrt(1.25))
    # an example the others agree on exactly is held to the floor, not divided by zero
    flat = np.array([[0.0, 3.0], [2.0, 3.0]])  # variances (2, 0), pooled 1
    got = membership(np.array([1.0, 4.0]), flat, per_example=True)
    assert got == pytest.approx(math.sqrt((0.0 + 1.0 / (LIRA_VARIANCE_FLOOR * 1.0)) / 2))


def test_membership_sees_departures_the_mean_hides():
    rng = np.random.default_rng(0)
    refs = rng.normal(0.0, 1.0, size=(8, 200))
    swing = np.where(np.arange(200) % 2 == 0, 5.0, -5.0)  # half +5 sd, half −5 sd: mean unchanged
    assert abs(swing.mean()) < 1e-12
    assert membership(swing, refs, per_example=False) > 3.0
    assert membership(rng.normal(0.0, 1.0, 200), refs, per_example=False) < 1.5
    assert math.isnan(membership(np.full(200, np.nan), refs, per_example=False))


@pytest.fixture(scope="module")
def flipped_split(audit_digits):
    from unlearnkit import ForgetSpec, make_split

    return make_split(audit_digits, ForgetSpec(flipped=FLIPPED))


def test_sample_plan_holds_out_half_and_follows_the_seed(flipped_split):
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.relearning import SAMPLE_DRAWS, SAMPLE_MAX_SHOTS, relearn_plan

    n = len(flipped_split.train_forget)
    plan, why = relearn_plan(flipped_split, AuditConfig(), seed=5)
    assert why == "" and plan.sample and plan.sets() == ("train",)
    assert len(plan.draws) == SAMPLE_DRAWS
    for d in plan.draws:
        assert d.forget.size == min(n // 2, SAMPLE_MAX_SHOTS)
        assert not set(d.forget) & set(d.held_out) and d.held_out.size > 0
        assert set(np.unique(flipped_split.train_retain.y[d.retain].numpy())) == set(range(10))
    again, _ = relearn_plan(flipped_split, AuditConfig(), seed=5)
    other, _ = relearn_plan(flipped_split, AuditConfig(), seed=6)
    assert all(np.array_equal(a.forget, b.forget) for a, b in zip(plan.draws, again.draws))
    assert not all(np.array_equal(a.forget, b.forget) for a, b in zip(plan.draws, other.draws))


def _train_flipped(kind, split, seed, cache):
    from unlearnkit.training import default_recipe, reference_model

    with single_thread():
        return reference_model(kind, split, "small_cnn", default_recipe("digits", "small_cnn"), seed=seed,
                               cache_dir=cache, progress=False).model


@pytest.mark.heavy
def test_flipped_labels_original_flagged_and_held_out_retrain_not(flipped_split, audit_cache, report_cache):
    """The done-when of issue 43 in small (5 references, not 8): the original that memorised the flipped labels
    is `not_forgotten`, and the relearning of the flipped labels separates it from the references by far (its
    kept fraction near 1, a held-out retrain's near 0: neither near the 0.1 margin); the held-out retrain is
    never flagged. Its `erased` is not asserted (it rests on intervals a CPU's rounding can move)."""
    from unlearnkit.audit import AuditConfig

    original = _train_flipped("original", flipped_split, 0, audit_cache)
    refs = [_train_flipped("retrain", flipped_split, s, audit_cache) for s in range(1, 6)]
    held_out = _train_flipped("retrain", flipped_split, 9, audit_cache)
    cfg = AuditConfig(audit_seed=11)
    rep_o = cached_audit(report_cache, ("flipped", "original"), original, original, refs, flipped_split, config=cfg)
    rep_r = cached_audit(report_cache, ("flipped", "retrain9"), original, held_out, refs, flipped_split, config=cfg)
    assert rep_o.verdict == "not_forgotten"
    assert rep_r.verdict not in ("not_forgotten", "suppressed", "overforgotten", "collapsed")
    for rep, lo, hi in ((rep_o, 0.8, 1.2), (rep_r, -0.3, 0.3)):
        relearning = [c for c in rep.checks if c.measure.family == "relearning"]
        assert relearning and all(c.testable for c in relearning)
        assert all(lo < c.result.kept < hi for c in relearning), [c.result.kept for c in relearning]
        lira = [c for c in rep.checks if c.measure.name == "output membership"]
        assert len(lira) == 1 and lo < lira[0].result.kept < hi
