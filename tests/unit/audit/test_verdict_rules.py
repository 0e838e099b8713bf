"""The verdict's rule chain on constructed measurements: each rule, the family's error control."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.layers import Interval, LayerResult
from unlearnkit.audit.resurface import ResurfaceResult
from unlearnkit.audit.verdict import (
    RULES,
    Comparison,
    Measurements,
    collapsed,
    comparisons,
    decide,
    holm,
    no_positive_control,
    not_equivalent,
    not_forgotten,
    p_value,
    suppressed,
    too_few,
)
from unlearnkit.metrics.output_test import output_test

OUT = {"forget_acc": 0.0, "retain_acc": 99.0, "test_retain_acc": 98.0}
LOG2 = math.log(2.0)


def _cmp(layer, value, low, high, original=(1.6, 1.4, 1.8), data="train", p_holm=1.0, two_sided=True):
    """A separability comparison on the log scale (tolerance 2x); ``original`` the positive control."""
    return Comparison(data, layer, "separability", value, low, high, LOG2, two_sided, *original, p=p_holm,
                      p_holm=p_holm)


def _layers(names, data=("train",)):
    return {d: [LayerResult(n, probed=True, cka_original=0.5, cka_retrain=0.9) for n in names] for d in data}


def _output(shift=0.0, original=-40.0, k=5, n=100):
    """The output membership test of constructed φ: references scattered around 0, the unlearned model
    shifted by ``shift`` (per example), the original at ``original``."""
    rng = np.random.default_rng(0)
    refs = rng.normal(0.0, 1.0, (k, n)) + rng.normal(0.0, 0.3, (k, 1))
    return output_test(np.full(n, shift) + rng.normal(0, 1.0, n), refs, np.full(n, original), 0.00625)


WITHIN = _output()


def _m(comps, n_forget=100, resurfacing=None, out_u=OUT, out_r=OUT, data=("train",), output=WITHIN, utility=None):
    return Measurements(out_u, out_r, {"test_retain": 97.0}, {"test_retain": 97.0}, tuple(comps),
                        _layers(sorted({c.layer for c in comps}) or ["penultimate"], data), "train",
                        {d: n_forget for d in data}, False, resurfacing or {}, n_forget, AuditConfig(), output,
                        utility or {})


def test_the_rules_run_in_the_documented_order():
    assert [r.__name__ for r in RULES] == ["collapsed", "not_forgotten", "suppressed", "overforgotten", "too_few",
                                           "no_positive_control", "uncalibrated", "not_equivalent", "unmeasured",
                                           "output_untested", "blocked", "erased"]


def test_holm_adjusted_p_values_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4x0.005 = 0.02, 3x0.01 = 0.03, 2x0.03 = 0.06, max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_p_value_of_a_t_interval_and_of_bootstrap_draws():
    iv = Interval(3.0, 1.0, 5.0, se=0.8, df=19)
    assert p_value(iv, 2.0, False, False) == pytest.approx(stats.t.sf((3.0 - 2.0) / 0.8, 19))
    two = p_value(Interval(-3.0, -5.0, -1.0, se=0.8, df=19), 2.0, False, True)
    assert two == pytest.approx(2 * stats.t.cdf((-3.0 + 2.0) / 0.8, 19))
    draws = np.sort(np.log(np.array([1.5, 1.9, 2.1, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0])))
    boot = Interval(3.0, 1.5, 6.0, draws=draws)
    assert p_value(boot, 2.0, True, False) == pytest.approx((1 + 2) / 10)  # 2 draws <= log 2


def test_one_layer_at_the_originals_level_is_never_erased():
    """The old rule read "erased" when any one layer was clear of the original: here block3 is
    retrain-like, the penultimate layer still sits at the original's level (not significantly beyond
    the tolerance after correction, so not suppressed)."""
    comps = [_cmp("block3", 0.0, -0.1, 0.1), _cmp("penultimate", math.log(1.9), math.log(1.5), math.log(2.4))]
    d = decide(_m(comps))
    assert d.verdict == "inconclusive", d
    assert "penultimate (separability)" in d.evidence[-1] and "would decide" in d.evidence[-1]
    assert not_equivalent(_m(comps)) is not None


def test_erased_needs_every_layer_within_and_the_positive_control():
    within = [_cmp("block3", 0.0, -0.1, 0.1), _cmp("penultimate", 0.1, -0.1, 0.3)]
    assert decide(_m(within)).verdict == "erased"
    no_control = [Comparison(**{**c.__dict__, "original_low": 0.2, "original": 0.3}) for c in within]
    d = decide(_m(no_control))
    assert d.verdict == "inconclusive" and any("positive control failed" in e for e in d.evidence)
    assert any(e.startswith("cannot test penultimate") for e in d.evidence)
    assert no_positive_control(_m(no_control)) is not None


def test_a_flag_on_either_audit_data_is_suppressed_after_correction():
    comps = [_cmp("penultimate", 0.0, -0.1, 0.1), _cmp("penultimate", 1.2, 1.0, 1.4, data="test", p_holm=0.004)]
    d = decide(_m(comps, data=("train", "test")))
    assert d.verdict == "suppressed" and "(test data) still separates" in d.evidence[-1]
    assert suppressed(_m([_cmp("penultimate", 1.2, 1.0, 1.4, p_holm=0.06)])) is None  # not after Holm


def test_resurfacing_enters_only_through_checks_marked_in_verdict():
    comps = [_cmp("penultimate", 0.0, -0.1, 0.1)]
    reported = ResurfaceResult("relearn", True, "", 0.0, 90.0, 0.0, 90.0, True, in_verdict=False, margin=20)
    d = decide(_m(comps, resurfacing={"relearn": reported}))
    # a check that does not decide never flags, but it withholds erased when it fires
    assert d.verdict == "inconclusive" and "does not decide here" in d.evidence[-1], d
    quiet = ResurfaceResult("relearn", True, "", 0.0, 5.0, 0.0, 5.0, False, in_verdict=False, margin=20)
    assert decide(_m(comps, resurfacing={"relearn": quiet})).verdict == "erased"
    read = ResurfaceResult("head_refit", True, "", 0.0, 95.0, 25.0, 70.0, True, margin=35)
    d = decide(_m(comps, resurfacing={"head_refit": read}))
    assert d.verdict == "suppressed" and "re-fitting the head" in d.evidence[-1]


def test_a_resurfacing_check_that_cannot_flag_says_so():
    """Head relearning with a 129-point margin (a wide spread among the references, as on mnist5k class 6)
    cannot exceed it whatever the model holds: the evidence says so rather than letting silence count."""
    comps = [_cmp("penultimate", 0.0, -0.1, 0.1)]
    wide = ResurfaceResult("head_relearn", True, "", 0.0, 40.0, 12.0, 28.0, False, margin=129.0)
    d = decide(_m(comps, resurfacing={"head_relearn": wide}))
    assert any(e.startswith("(no power)") and "129.0 points" in e and "88.0 points" in e for e in d.evidence), d
    narrow = ResurfaceResult("head_relearn", True, "", 0.0, 40.0, 12.0, 28.0, False, margin=30.0)
    assert not any("(no power)" in e for e in decide(_m(comps, resurfacing={"head_relearn": narrow})).evidence)
    reported = ResurfaceResult("relearn", True, "", 0.0, 0.0, 0.0, 0.0, False, in_verdict=False, margin=129.0)
    assert not any("(no power)" in e for e in decide(_m(comps, resurfacing={"relearn": reported})).evidence)


def test_output_rules_come_first():
    low = dict(OUT, retain_acc=50.0)
    assert collapsed(_m([], out_u=low)).verdict == "collapsed"
    remembers = dict(OUT, forget_acc=95.0)
    assert not_forgotten(_m([], out_u=remembers)).verdict == "not_forgotten"
    assert too_few(_m([_cmp("penultimate", 0.0, -0.1, 0.1)], n_forget=3)).verdict == "inconclusive"


def test_family_controls_false_flags_of_a_retrain_at_the_tolerance_boundary():
    """Eight comparisons whose true value sits exactly at the tolerance (the worst case a genuine
    retrain can be in): Holm keeps the chance that any is flagged at or below 5 %."""
    rng = np.random.RandomState(0)
    j, n_sim = 20, 2000
    flags = unadjusted = 0
    for _ in range(n_sim):
        p = []
        for _ in range(8):  # per-split log ratios centred on the tolerance, a t-interval of their mean
            d = LOG2 + rng.randn(j)
            se = d.std(ddof=1) / math.sqrt(j)
            p.append(p_value(Interval(d.mean(), d.mean() - 2 * se, d.mean() + 2 * se, se, j - 1), LOG2, False,
                             False))
        flags += min(holm(p)) < 0.05
        unadjusted += min(p) < 0.05
    assert flags / n_sim <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n_sim)
    assert unadjusted / n_sim > 0.25  # without the correction a retrain would be flagged in ~1/3 of audits


def test_comparisons_cover_every_probed_layer_of_every_audit_data():
    iv = Interval(1.1, 1.0, 1.2, draws=np.sort(np.log(np.linspace(0.95, 1.25, 2000))))
    layers = {d: [LayerResult(n, probed=True, separability_ratio=iv, separability_ratio_original=iv,
                              separability_margin=2.0) for n in ("a", "b", "c")] for d in ("test", "train")}
    layers["test"].append(LayerResult("skipped", probed=False))
    fam = comparisons(layers, sample_level=False)
    assert [(c.data, c.layer) for c in fam] == [(d, n) for d in ("test", "train") for n in ("a", "b", "c")]
    assert all(c.p <= c.p_holm for c in fam) and fam[0].margin == pytest.approx(LOG2)
    assert all(c.two_sided for c in comparisons(layers, sample_level=True))


def test_an_interval_that_excludes_its_estimate_is_drawn():
    """A bootstrap percentile interval may lie beside its point estimate (seen on a 10 % random forget
    set): the audit's plot draws it instead of failing on a negative error bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from unlearnkit.audit.render import _intervals

    beside = Interval(2.0, 2.1, 3.0)
    r = LayerResult("penultimate", probed=True, separability_ratio=beside, separability_ratio_original=beside)
    report = SimpleNamespace(layers={"train": [r]}, rests_on="train")
    fig, ax = plt.subplots()
    _intervals(ax, report, "separability_ratio")
    bars = [seg for c in ax.collections for seg in c.get_segments()]  # the vertical error bar
    plt.close(fig)
    assert len(bars) == 1 and sorted(bars[0][:, 1]) == pytest.approx([2.0, 3.0])


def test_far_below_retrain_is_overforgotten_not_within():
    """Two-sided: a layer far less separable than retrain's (0.3x, significantly beyond the 2x tolerance on
    the low side) is a deviation, not "within"."""
    low = _cmp("penultimate", math.log(0.3), math.log(0.2), math.log(0.45), p_holm=0.001)
    assert not low.within
    d = decide(_m([_cmp("block3", 0.0, -0.1, 0.1), low]))
    assert d.verdict == "overforgotten", d
    # not significant after correction: not within either, so never erased
    d = decide(_m([_cmp("block3", 0.0, -0.1, 0.1), Comparison(**{**low.__dict__, "p_holm": 0.2})]))
    assert d.verdict == "inconclusive", d


def test_erased_names_the_layers_it_certifies_and_those_it_cannot():
    """A layer where the original is inside the tolerance (or that is kept from the original) is untestable:
    erased certifies the others and says which it could not test, and why."""
    kept = Comparison("train", "block1", "separability", 0.0, -0.05, 0.05, LOG2, True, 0.1, 0.0, 0.2,
                      kept="the representation is kept from the original (CKA 1.000 to it; references 0.900)")
    assert not kept.testable and kept.within
    comps = [kept, _cmp("block3", 0.0, -0.1, 0.1), _cmp("penultimate", 0.1, -0.1, 0.3)]
    d = decide(_m(comps))
    assert d.verdict == "erased", d
    assert any(e.startswith("certified at block3 (separability), penultimate (separability)")
               for e in d.evidence), d.evidence
    assert any(e.startswith("cannot test block1") and "kept from the original" in e for e in d.evidence)
    # with no testable layer at all: inconclusive, never erased
    d = decide(_m([kept]))
    assert d.verdict == "inconclusive"


def test_an_undefined_statistic_is_never_within():
    """A statistic at its cap (a reference separates the forget set without overlap) or undefined (too few
    rows for the dimension) is "cannot decide", never "within"."""
    for status in ("reference_separated", "too_few_rows", "reference_not_separated"):
        c = Comparison("train", "penultimate", "separability", 0.0, -0.01, 0.01, LOG2, True, 1.6, 1.4, 1.8,
                       status=status)
        assert not c.defined and not c.within and not c.testable
        assert "cannot test" not in c.untestable_reason() and c.untestable_reason()
        d = decide(_m([_cmp("block3", 0.0, -0.1, 0.1), c]))
        assert d.verdict == "erased" and any(e.startswith("cannot test penultimate") for e in d.evidence)
    # an infinite ratio (the model separates the groups without overlap where the references do not) flags
    inf = Comparison("train", "penultimate", "separability", math.inf, math.inf, math.inf, LOG2, True, 1.6, 1.4,
                     1.8, p=0.0, p_holm=0.0, status="separated")
    assert inf.defined and decide(_m([_cmp("block3", 0.0, -0.1, 0.1), inf])).verdict == "suppressed"


def test_the_output_membership_test_decides_and_erased_needs_it():
    """Every layer within tolerance is not enough: the output test must show the forget set's outputs are
    retrain-like too; beyond them on either side is a flag, and an untested output withholds erased."""
    comps = [_cmp("block3", 0.0, -0.1, 0.1), _cmp("penultimate", 0.0, -0.1, 0.1)]
    assert WITHIN.decision == "within"
    d = decide(_m(comps))
    assert d.verdict == "erased" and any("output membership test" in e and "retrain-like" in e for e in d.evidence)
    below, above = _output(shift=-30.0), _output(shift=30.0)
    assert (below.decision, above.decision) == ("below", "above")
    d = decide(_m(comps, output=below))
    assert d.verdict == "overforgotten" and any("forgotten side" in e for e in d.evidence), d
    assert decide(_m(comps, output=above)).verdict == "not_forgotten"
    one_ref = output_test(np.zeros(100), np.zeros((1, 100)), np.full(100, -40.0))
    d = decide(_m(comps, output=one_ref))
    assert d.verdict == "inconclusive" and any("2 or more retrained references" in e for e in d.evidence), d
    no_power = _output(original=0.1)
    assert no_power.decision == "untested"
    d = decide(_m(comps, output=no_power))
    assert d.verdict == "inconclusive" and any("original itself is inside" in e for e in d.evidence), d
    assert decide(_m(comps, output=None)).verdict == "inconclusive"


def test_the_utility_axis_qualifies_the_verdict_line():
    from unlearnkit.audit.report import verdict_line

    comps = [_cmp("block3", 0.0, -0.1, 0.1)]
    lost = {"loss": 17.7, "by": "test_retain_acc", "budget": 2.0, "spread_bound": 1.2, "flagged": True}
    d = decide(_m(comps, utility=lost))
    assert d.verdict == "erased"
    assert any(e.startswith("utility: 17.7 points of test_retain accuracy") for e in d.evidence)
    assert verdict_line("erased", lost) == "erased · utility −17.7 pts"
    assert verdict_line("erased", {**lost, "flagged": False}) == "erased"
    assert verdict_line("collapsed", lost) == "collapsed"  # collapsed already says it
    assert verdict_line("suppressed", None) == "suppressed"


def test_utility_loss_by_hand():
    from unlearnkit.audit.core import OutputNumbers, utility_loss

    refs = [{"retain_acc": 99.0, "test_retain_acc": v} for v in (98.0, 98.5, 97.5)]
    outs = OutputNumbers({"retain_acc": 98.9, "test_retain_acc": 80.8}, {}, refs, {})
    u = utility_loss(outs, AuditConfig())
    # test-retain: mean 98.0 - 80.8 = 17.2 points; spread bound t_{2, 0.975} (4.3027) x sd 0.5 x sqrt(4/3)
    assert u["by"] == "test_retain_acc" and u["loss"] == pytest.approx(17.2)
    assert u["spread_bound"] == pytest.approx(4.302653 * 0.5 * math.sqrt(4 / 3), rel=1e-5) and u["flagged"]
    kept = utility_loss(OutputNumbers({"retain_acc": 99.0, "test_retain_acc": 96.5}, {}, refs, {}), AuditConfig())
    assert kept["loss"] == pytest.approx(1.5) and not kept["flagged"]  # under the 2-point budget
    wide = utility_loss(OutputNumbers({"retain_acc": 99.0, "test_retain_acc": 95.7}, {}, refs, {}), AuditConfig())
    assert not wide["flagged"]  # 2.3 points: beyond the 2-point budget but inside the references' spread (2.48)
